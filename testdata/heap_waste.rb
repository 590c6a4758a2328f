# A Ruby program that wastes memory the three ways the heap's Waste view
# finds: 4,000 Strings that each hold the same value in their own memory
# (made at run time, not frozen literals), 3,000 empty Arrays, at a line
# it reports, and 200 oversized Arrays: 2,000 elements each, then select!
# down to 3, which keeps the buffer. With allocation tracing on, it dumps
# its heap with ObjectSpace.dump_all to DUMP and writes {"pid", "value",
# "copies", "copy_bytes" (their memsize summed, by
# ObjectSpace.memsize_of), "empty_arrays", "empty_site",
# "oversized_arrays", "oversized_length", "oversized_bytes" (memsize
# summed), "oversized_site"} to REPORT.
#
#   ruby testdata/heap_waste.rb REPORT DUMP
require "objspace"
require "json"

report, dump = ARGV.fetch(0), ARGV.fetch(1)
ObjectSpace.trace_object_allocations_start
part = "customer"
COPIES = Array.new(4000) { "#{part}-record-status-pending" }
EMPTY = Array.new(3000) { [] }
OVERSIZED = Array.new(200) do
  a = Array.new(2000) { |i| i }
  a.select! { |x| x < 3 }
  a
end
GC.start
File.open(dump, "w") { |f| ObjectSpace.dump_all(output: f) }
File.write(report + ".tmp", JSON.generate({ "pid" => Process.pid, "value" => COPIES.first, "copies" => COPIES.size,
                                            "copy_bytes" => COPIES.sum { |s| ObjectSpace.memsize_of(s) },
                                            "empty_arrays" => EMPTY.size,
                                            "empty_site" => "#{ObjectSpace.allocation_sourcefile(EMPTY.last)}:#{ObjectSpace.allocation_sourceline(EMPTY.last)}",
                                            "oversized_arrays" => OVERSIZED.size, "oversized_length" => OVERSIZED.first.size,
                                            "oversized_bytes" => OVERSIZED.sum { |a| ObjectSpace.memsize_of(a) },
                                            "oversized_site" => "#{ObjectSpace.allocation_sourcefile(OVERSIZED.last)}:#{ObjectSpace.allocation_sourceline(OVERSIZED.last)}" }))
File.rename(report + ".tmp", report)
