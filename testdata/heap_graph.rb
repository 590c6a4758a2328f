# A Ruby program that builds heap graphs of known shape, dumps its heap with
# ObjectSpace.dump_all to the file named by ARGV[1] and writes what it built
# to ARGV[0] as JSON (object addresses as ObjectSpace.dump prints them):
#
#   ruby testdata/heap_graph.rb REPORT DUMP [EXTRA]
#
# - a dominator: $holder, an Array, holds one Hash that alone holds 1,000
#   Strings ("hash", "strings", "strings_memsize");
# - a cycle: $cycle is node a, a -> b -> c -> a ("cycle": [a, b, c]);
# - a path: the constant PathHolder::CONST, an Array, holds a Hash that
#   holds a String with a unique value ("path": {module, array, hash,
#   target, value}).
#
# EXTRA (default 0) adds that many small Strings in one Array ($extra), for
# the benchmark's dump of over a million objects. The report is written
# after the dump (renamed into place, so it appears whole); then the program
# exits.
require "objspace"
require "json"

report, dump = ARGV.fetch(0), ARGV.fetch(1)
extra = Integer(ARGV.fetch(2, "0"))

def addr(obj)
  JSON.parse(ObjectSpace.dump(obj)).fetch("address")
end

# The dominator first, so that later work overwrites whatever the C stack
# kept of its Strings (dump_all scans the machine stack conservatively).
def build_holder
  h = {}
  1_000.times { |i| h[i] = "dominated string #{i} " + ("x" * (i % 50)) }
  [h]
end
$holder = build_holder

class CycleNode
  attr_accessor :next
end

def build_cycle
  a, b, c = CycleNode.new, CycleNode.new, CycleNode.new
  a.next = b
  b.next = c
  c.next = a
  a
end
$cycle = build_cycle

PATH_TAG = "#{Process.pid} #{rand(1 << 30)}"
module PathHolder
  CONST = [{ target: "rbscope path target #{PATH_TAG}" }]
end

$extra = Array.new(extra) { |i| "s#{i}" }

hash = $holder[0]
strings = hash.values
a = $cycle
info = {
  "pid" => Process.pid,
  "version" => RUBY_VERSION,
  "holder" => addr($holder),
  "hash" => addr(hash),
  "strings" => strings.map { |s| addr(s) },
  "strings_memsize" => strings.sum { |s| ObjectSpace.memsize_of(s) },
  "cycle" => [addr(a), addr(a.next), addr(a.next.next)],
  "path" => {
    "module" => addr(PathHolder),
    # const_get, not PathHolder::CONST: Ruby 3.4's inline constant caches
    # would hold the Array too, and make another path as short
    "array" => addr(PathHolder.const_get(:CONST)),
    "hash" => addr(PathHolder.const_get(:CONST)[0]),
    "target" => addr(PathHolder.const_get(:CONST)[0][:target]),
    "value" => "rbscope path target #{PATH_TAG}", # built anew: the report must not hold the target
  },
}
strings = hash = a = nil

5.times { JSON.generate(info) } # churn the C stack
GC.start
File.open(dump, "w") { |f| ObjectSpace.dump_all(output: f) }

tmp = report + ".tmp"
File.write(tmp, JSON.generate(info))
File.rename(tmp, report)
