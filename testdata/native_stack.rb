# A program whose threads stand still in known places, for stack --native.
# ARGV: the report path (written when every thread waits: {"pid": ...}) and
# the path of testdata/native/bigframe.c built as a shared library, or "".
require "json"

report, lib = ARGV
q = Queue.new
popper = Thread.new { Thread.current.name = "queue-pop"; q.pop }
caller_thread = nil
if lib && !lib.empty?
  require "fiddle"
  handle = Fiddle.dlopen(lib)
  callback = Fiddle::Closure::BlockCaller.new(Fiddle::TYPE_VOID, []) { sleep }
  big = Fiddle::Function.new(handle["rbscope_big_frame"], [Fiddle::TYPE_VOIDP], Fiddle::TYPE_VOID, need_gvl: true)
  caller_thread = Thread.new { Thread.current.name = "fiddle"; big.call(callback) }
end
# Ruby 2.7's Fiddle has no need_gvl: (its calls always release the GVL);
# the C library is not called there.

def level3; sleep; end
def level2; level3; end
def level1; [1].each { level2 }; end

sleep 0.05 until popper.status == "sleep" && (caller_thread.nil? || caller_thread.status == "sleep")
File.write(report + ".tmp", JSON.generate({ "pid" => Process.pid }))
File.rename(report + ".tmp", report)
level1
