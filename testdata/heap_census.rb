# A Ruby program that builds a known heap and writes what Ruby itself counts
# of it to the file named by ARGV[0], as JSON: {"pid", "version",
# "count_objects" (ObjectSpace.count_objects), "heap_probe"
# (what ObjectSpace.each_object(HeapProbe).count says), "extra"}. The rbscope tests take
# a census of its heap from outside and compare.
#
#   ruby testdata/heap_census.rb REPORT [EXTRA]
#
# EXTRA (default 0) adds that many more small objects (Objects, Strings and
# Arrays, a third each) for the benchmark's large heap.
#
# The counts are taken after a full GC and the heap is kept as counted: the
# report is written, a second full GC frees what writing it allocated, GC is
# disabled and the main thread sleeps in Kernel#sleep for good. The test waits
# for that sleep before it reads. Writing the report once before counting
# creates whatever writing it leaves behind for good (method caches, interned
# strings), so that the second GC brings the heap back to what was counted.
require "json"

report = ARGV.fetch(0)
extra = Integer(ARGV.fetch(1, "0"))

class HeapProbe
  def initialize(i)
    @i = i
  end
end

$probes = Array.new(50_000) { |i| HeapProbe.new(i) }
$strings = Array.new(20_000) { |i| "heap census string #{i}" }
$long_strings = Array.new(1_000) { |i| "x" * (100 + i) } # not embedded: a malloc'd buffer
$hash_of_arrays = {}
2_000.times { |i| $hash_of_arrays[i] = Array.new(10) { |j| i + j } } # not embedded either
$extra = Array.new(extra) do |i|
  case i % 3
  when 0 then Object.new
  when 1 then "extra #{i}"
  else [i]
  end
end

def write_report(path, counts, probes, extra)
  tmp = path + ".tmp"
  File.write(tmp, JSON.generate({ "pid" => Process.pid, "version" => RUBY_VERSION,
                                  "count_objects" => counts, "heap_probe" => probes, "extra" => extra }))
  File.rename(tmp, path)
end

counts = {}
write_report(report + ".warmup", ObjectSpace.count_objects(counts), 0, extra)
GC.start
probes = ObjectSpace.each_object(HeapProbe) {} # the count, without an Enumerator to free
GC.start
ObjectSpace.count_objects(counts)
write_report(report, counts, probes, extra)
GC.start
GC.disable
sleep
