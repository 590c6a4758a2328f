# A Ruby program that builds a known heap, dumps it with
# ObjectSpace.dump_all and keeps it as dumped, for the tests that compare
# `rbscope heap dump` with Ruby's own dump:
#
#   ruby testdata/heap_dump.rb REPORT DUMP [EXTRA]
#
# Everything known hangs off one Hash in the global $dump_root: a Hash of
# Arrays of Strings (small and large, embedded and not), objects with few
# and many instance variables, small and large Structs, a cycle, shared
# Strings and Arrays, Rationals and Complexes with heap parts, a Hash with
# a default proc, Strings that need JSON escapes, a dynamic Symbol.
# PathHolder::CONST (a constant) holds an Array holding a Hash holding a
# String.
#
# The program dumps its heap to DUMP after a full GC, timing the dump, then
# writes REPORT (renamed into place) as JSON: {"pid", "version", "root"
# (the address of $dump_root), "known" (name -> address), "dump_seconds"}.
# Then a full GC frees what the dump and the report allocated, GC is
# disabled and the main thread sleeps for good.
#
# EXTRA (default 0) adds that many more small objects (Objects, Strings,
# Arrays, a third each) in $extra, for the benchmark's large heap.
require "objspace"
require "json"

report, dump = ARGV.fetch(0), ARGV.fetch(1)
extra = Integer(ARGV.fetch(2, "0"))

def addr(obj)
  JSON.parse(ObjectSpace.dump(obj)).fetch("address")
end

class DumpHolder
  def initialize(a, b)
    @a = a
    @b = b
  end
end

class ManyIvars
  def initialize
    12.times { |i| instance_variable_set("@v#{i}", "ivar #{i}") }
  end
end

class CycleNode
  attr_accessor :next
end

Pair = Struct.new(:left, :right)
Wide = Struct.new(:m0, :m1, :m2, :m3, :m4, :m5, :m6, :m7, :m8, :m9)

module PathHolder
  CONST = [{ target: "rbscope dump path target" }]
end

def build
  root = {}
  hoa = {}
  3.times { |i| hoa["small #{i}"] = Array.new(3) { |j| "s#{i}.#{j}" } }
  20.times { |i| hoa["large #{i}"] = Array.new(40) { |j| "string #{i}.#{j} " + ("x" * (j % 30)) } }
  root[:hash_of_arrays] = hoa
  root[:small_hash] = { a: "one", "b" => [1, 2] }
  root[:default_proc] = Hash.new { |h, k| h[k] = k.to_s }
  with_default = Hash.new("the default")
  with_default[:k] = "v"
  root[:default_value] = with_default
  root[:holder] = DumpHolder.new("held a", ["held b"])
  root[:many_ivars] = ManyIvars.new
  root[:pair] = Pair.new("left", ["right"])
  root[:wide] = Wide.new(*Array.new(10) { |i| "member #{i}" })
  a, b, c = CycleNode.new, CycleNode.new, CycleNode.new
  a.next = b
  b.next = c
  c.next = a
  root[:cycle] = a
  big = "y" * 300
  root[:big_string] = big
  root[:shared_string] = big[10..250]
  long_array = Array.new(50) { |i| "elem #{i}" }
  root[:long_array] = long_array
  root[:shared_array] = long_array[5..45]
  root[:empty_string] = ""
  root[:empty_array] = []
  root[:escapes] = "quote\" backslash\\ newline\n tab\t nul\u0000 ctrl\u0001 del\u007f"
  root[:binary] = "\xff\x00binary".b
  root[:utf8] = "héllo wörld"
  root[:frozen] = "frozen string".freeze
  root[:rational] = Rational(2**70, 3)
  root[:complex] = Complex(2**70, 2**71)
  root[:float] = 1.5e300
  root[:bignum] = 2**100
  root[:symbol] = "dynamic symbol #{Process.pid}".to_sym
  root[:range] = (1..10)
  root
end

$dump_root = build
$extra = Array.new(extra) do |i|
  case i % 3
  when 0 then Object.new
  when 1 then "extra #{i}"
  else [i]
  end
end

known = {}
$dump_root.each { |k, v| known[k.to_s] = addr(v) }
known["root"] = addr($dump_root)
known["holder_class"] = addr(DumpHolder)
known["path_module"] = addr(PathHolder)
known["path_array"] = addr(PathHolder::CONST)
known["path_hash"] = addr(PathHolder::CONST[0])
known["path_target"] = addr(PathHolder::CONST[0][:target])
known["hoa_first_array"] = addr($dump_root[:hash_of_arrays]["large 0"])
known["hoa_first_string"] = addr($dump_root[:hash_of_arrays]["large 0"][0])

5.times { JSON.generate(known) } # churn the C stack
GC.start
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
File.open(dump, "w") { |f| ObjectSpace.dump_all(output: f) }
took = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0

tmp = report + ".tmp"
File.write(tmp, JSON.generate({ "pid" => Process.pid, "version" => RUBY_VERSION, "root" => known["root"],
                                "known" => known, "dump_seconds" => took }))
File.rename(tmp, report)
GC.start
GC.disable
sleep
