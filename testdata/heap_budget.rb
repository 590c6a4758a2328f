# A Ruby program whose Arrays lie about their length, for the test that a
# heap dump's reads stay bounded (cmd/rbscope's TestHeapDumpReadBudget):
#
#   ruby testdata/heap_budget.rb REPORT LEN_OFFSET PTR_OFFSET
#
# LEN_OFFSET and PTR_OFFSET are where struct RArray keeps a non-embedded
# Array's length and element pointer (the test takes them from rbscope's
# layout of this Ruby).
# It makes a 64 MB String and 2,000 Arrays of 100 elements, then rewrites
# each Array's heap length to 8M elements and its pointer to the String's
# bytes (with Fiddle): 128 GB of elements claimed, 64 MB held. Its own GC
# would crash on them, so GC is disabled first. It writes REPORT (renamed
# into place) as JSON {"pid"} and sleeps.
require "fiddle"
require "json"

report = ARGV.fetch(0)
len_off, ptr_off = Integer(ARGV.fetch(1)), Integer(ARGV.fetch(2))
GC.disable
big = "x" * (64 << 20)
ptr = Fiddle::Pointer[big].to_i
arrays = Array.new(2_000) { Array.new(100, 0) }
arrays.each do |a|
  raw = Fiddle::Pointer.new(Fiddle.dlwrap(a))
  raw[len_off, 8] = [8 << 20].pack("Q")
  raw[ptr_off, 8] = [ptr].pack("Q")
end
$keep = [big, arrays]
tmp = report + ".tmp"
File.write(tmp, JSON.generate({ "pid" => Process.pid }))
File.rename(tmp, report)
sleep
