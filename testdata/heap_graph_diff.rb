# A Ruby program that dumps its heap twice with ObjectSpace.dump_all, with
# 5,000 new objects of class Leaky (kept in a global) in between, and writes
# what it did to ARGV[0] as JSON: {"pid", "version", "before", "after"
# (the dumps' paths, ARGV[1] and ARGV[2]), "leaky" (how many), "site"
# ("file:line" where the Leaky objects were allocated)}.
#
#   ruby testdata/heap_graph_diff.rb REPORT BEFORE AFTER [EXTRA]
#
# EXTRA (default 0) adds that many more objects (Strings, small Arrays and
# Objects, a third each, in Arrays of 10,000 in $extra) before the first dump, for
# bench/heap_scale.sh's dumps of millions of objects; "last_leaky" reports
# the address of the last Leaky object, for `heap path`.
#
# Allocation tracing is on from the start, so the dumps carry file/line.
require "objspace"
require "json"

report, before, after = ARGV.fetch(0), ARGV.fetch(1), ARGV.fetch(2)
extra = Integer(ARGV.fetch(3, "0"))
# In Arrays of 10,000 each: one Array of millions would be a dump line of
# hundreds of megabytes.
$extra = Array.new((extra + 9_999) / 10_000) do |k|
  Array.new([10_000, extra - k * 10_000].min) do |j|
    i = k * 10_000 + j
    case i % 3
    when 0 then "extra #{i}"
    when 1 then [i, i]
    else Object.new
    end
  end
end

class Leaky
  def initialize(i)
    @i = i
  end
end

ObjectSpace.trace_object_allocations_start
LEAKY = 5_000
$leak = []
GC.start
File.open(before, "w") { |f| ObjectSpace.dump_all(output: f) }
site = "#{__FILE__}:#{__LINE__ + 1}"
LEAKY.times { |i| $leak << Leaky.new(i) }
GC.start
File.open(after, "w") { |f| ObjectSpace.dump_all(output: f) }

tmp = report + ".tmp"
File.write(tmp, JSON.generate({ "pid" => Process.pid, "version" => RUBY_VERSION, "before" => before,
                                "after" => after, "leaky" => LEAKY, "site" => site,
                                "last_leaky" => JSON.parse(ObjectSpace.dump($leak.last)).fetch("address") }))
File.rename(tmp, report)
