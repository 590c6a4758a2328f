# A Ruby program that holds marker Strings only through the less obvious
# edges of the object graph, dumps its heap with ObjectSpace.dump_all and
# keeps it as dumped, for the test that compares what `rbscope heap dump`
# can reach from its roots with what Ruby's own dump reaches:
#
#   ruby testdata/heap_reach.rb REPORT DUMP
#
# Each marker is held by exactly one holder, never by a global, a constant
# or an instance variable of an ordinary object:
#
#   proc          a local captured by a Proc (Proc -> env -> String)
#   lambda_self   the receiver captured by a lambda made in a method
#   method_recv   the receiver of a Method object
#   enumerator    the receiver of an Enumerator
#   queue         an element of a Queue
#   generic_ivar  an instance variable of a String (generic ivars)
#   fiber_local   Thread.current[:key] of a sleeping thread
#   thread_var    thread_variable_set on a sleeping thread
#   thread_stack  a local variable of a sleeping thread's block
#   cvar          a class variable
#   literal       a String literal inside a method's instructions
#   const_in_cls  a constant of an anonymous class held by a Proc
#   finalizer     a local captured by a finalizer's Proc
#
# It also keeps an ObjectSpace::WeakMap with one entry whose key and value
# an Array holds, and a class ReachSub < ReachBase (a superclass's list of
# subclasses is weak).
#
# The program writes DUMP after a full GC, then REPORT (renamed into place)
# as JSON: {"pid", "version", "markers": {name: address}, "weak": {"map",
# "key", "value", "base", "sub"}}. Then GC is
# disabled and the main thread sleeps for good.
require "objspace"
require "json"

report, dump = ARGV.fetch(0), ARGV.fetch(1)

def addr(obj)
  JSON.parse(ObjectSpace.dump(obj)).fetch("address")
end

markers = {}

def make_proc(markers)
  s = +"marker held by a proc's captured local"
  markers["proc"] = addr(s)
  proc { s.size }
end
$keep_proc = make_proc(markers)

class Carrier
  def make_lambda
    -> { self }
  end
end
carrier = Carrier.new
markers["lambda_self"] = addr(carrier)
$keep_lambda = carrier.make_lambda
carrier = nil

recv = +"marker held as a Method's receiver"
markers["method_recv"] = addr(recv)
$keep_method = recv.method(:upcase)
recv = nil

arr = [+"marker held by an enumerator's receiver"]
markers["enumerator"] = addr(arr)
$keep_enum = arr.each_with_index
arr = nil

q = Queue.new
item = +"marker queued"
markers["queue"] = addr(item)
q << item
$keep_queue = q
item = nil

gi = +"marker carrier"
held = +"marker held by a String's instance variable"
markers["generic_ivar"] = addr(held)
gi.instance_variable_set(:@held, held)
$keep_generic = gi
held = nil

ready = Queue.new
$sleeper = Thread.new do
  local = +"marker held by a sleeping thread's local"
  Thread.current[:rbscope_local] = +"marker held as a fiber-local"
  Thread.current.thread_variable_set(:rbscope_var, +"marker held as a thread variable")
  ready << addr(local)
  sleep
  local.size
end
markers["thread_stack"] = ready.pop
markers["fiber_local"] = addr($sleeper[:rbscope_local])
markers["thread_var"] = addr($sleeper.thread_variable_get(:rbscope_var))

class CvarHolder
  @@held = +"marker held by a class variable"
  def self.held
    @@held
  end
end
markers["cvar"] = addr(CvarHolder.held)

class LiteralHolder
  def literal
    "marker held by a method's instructions"
  end
end
lit = LiteralHolder.new.literal
# A non-frozen literal makes a new String per call; the iseq holds the
# one it copies from. Find that one by its value in Ruby's own dump below.

def make_anon(markers)
  anon = Class.new
  anon.const_set(:HELD, +"marker held by an anonymous class's constant")
  markers["const_in_cls"] = addr(anon::HELD)
  proc { anon }
end
$keep_anon = make_anon(markers)

def add_finalizer(markers)
  held = +"marker held by a finalizer"
  markers["finalizer"] = addr(held)
  $finalized = Object.new
  ObjectSpace.define_finalizer($finalized, proc { held.size })
end
add_finalizer(markers)

# A WeakMap's entries are weak references: reported apart, not held by it.
wm_key = +"weak map key"
wm_val = +"weak map value"
$weak_map = ObjectSpace::WeakMap.new
$weak_map[wm_key] = wm_val
$weak_held = [wm_key, wm_val]
class ReachBase; end
class ReachSub < ReachBase; end
weak = { "map" => addr($weak_map), "key" => addr(wm_key), "value" => addr(wm_val),
         "base" => addr(ReachBase), "sub" => addr(ReachSub) }
wm_key = wm_val = nil

5.times { JSON.generate(markers) } # churn the C stack
GC.start
File.open(dump, "w") { |f| ObjectSpace.dump_all(output: f) }
File.foreach(dump) do |line|
  next unless line.include?("marker held by a method's instructions")
  o = JSON.parse(line)
  next if o["address"] == addr(lit)
  markers["literal"] = o["address"]
end
lit = nil

tmp = report + ".tmp"
File.write(tmp, JSON.generate({ "pid" => Process.pid, "version" => RUBY_VERSION, "markers" => markers, "weak" => weak }))
File.rename(tmp, report)
GC.start
GC.disable
sleep
