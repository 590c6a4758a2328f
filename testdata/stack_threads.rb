# A Ruby program that puts its threads into known states and writes what it
# knows about itself (pid, thread names, native thread IDs, statuses and
# caller_locations taken on the very line each thread blocks on) to the file
# named by ARGV[0], as JSON. The rbscope tests read its stacks from outside
# and compare. Each "report ...; block" pair sits on one line, so the line of
# caller_locations is the line the thread is blocked on.
require "json"
require_relative "lib/native_tid"
require_relative "lib/sleepy_helper"

out = ARGV.fetch(0)
depth = Integer(ARGV.fetch(1, "3000"))
$reports = Queue.new

# report records the calling thread's stack. top lists the frames rbscope
# will see above caller_locations(0)'s first frame: [label, path, line], with
# path nil for C methods. A thread that keeps running a block may be caught
# between two of its calls, in the method that yields; between lists the
# lines that method's frame may then be at.
def report(locs, top, between = [])
  frames = locs.map { |l| [l.label, l.absolute_path || l.path, l.lineno] }
  $reports << { "name" => Thread.current.name, "main" => Thread.current == Thread.main,
                "tid" => Thread.current.native_thread_id, "top" => top, "frames" => frames,
                "between" => between }
end
REPORT = method(:report)

# core_frame is the frame a core method adds above its caller while it
# blocks or yields: [Owner#name, nil, nil] for a method written in C (all of
# them in Ruby 3.1), or, for one Ruby writes in Ruby itself (3.3's
# Kernel#loop and Thread::Queue#pop, under <internal:...>), the frame that
# Ruby's own Thread#backtrace_locations shows for it in a helper thread
# stopped inside it by stop.
def core_frame(owner, name, &stop)
  return ["#{owner}##{name}", nil, nil] if owner.instance_method(name).source_location.nil?
  t = Thread.new(&stop)
  sleep 0.01 until t.status == "sleep"
  locs = t.backtrace_locations
  t.kill
  t.join
  loc = locs.find { |l| l.label == name.to_s || l.label.end_with?("##{name}") }
  raise "no #{name} frame in #{locs.inspect}" unless loc
  [loc.label, loc.absolute_path || loc.path, loc.lineno]
end
LOOP_FRAME = core_frame(Kernel, :loop) { loop { sleep } }
POP_FRAME = core_frame(Thread::Queue, :pop) { Thread::Queue.new.pop }

# core_lines are the lines of a core method written in Ruby (3.3's
# Kernel#loop) that its instructions have, as Ruby's own disassembly gives
# them; none for one written in C, whose frame has no line.
def core_lines(owner, name)
  return [] if owner.instance_method(name).source_location.nil?
  RubyVM::InstructionSequence.of(owner.instance_method(name)).to_a.last.grep(Integer).uniq
end

def down(n)
  if n == 0
    report(caller_locations(0), [["Kernel#sleep", nil, nil]]); sleep
  else
    down(n - 1)
  end
end

# How this Ruby labels the block below: Ruby 3.4 qualifies methods.
BLOCK_IN_SPIN = RUBY_VERSION >= "3.4" ? "block in Object#spin" : "block in spin"

def spin
  x = 0
  report(caller_locations(0), [[BLOCK_IN_SPIN, __FILE__, __LINE__], LOOP_FRAME], core_lines(Kernel, :loop)); loop { x += 1 }
end

class Widget
  define_method(:wait_here) do |q|
    report(caller_locations(0), [POP_FRAME]); q.pop
  end
end

threads = []
threads << Thread.new { Thread.current.name = "sleeper"; [1].each { down(5) } }
threads << Thread.new { Thread.current.name = "deep"; down(depth) }
threads << Thread.new { Thread.current.name = "cruncher"; spin }
lock = Mutex.new
lock.lock
threads << Thread.new { Thread.current.name = "blocked"; report(caller_locations(0), [["Thread::Mutex#lock", nil, nil]]); lock.lock }
threads << Thread.new { Thread.current.name = "evaluator"; eval("report(caller_locations(0), [['Kernel#sleep', nil, nil]]); sleep") }
threads << Thread.new { Thread.current.name = "definer"; Widget.new.wait_here(Queue.new) }
threads << Thread.new do
  Thread.current.name = "classbody"
  class Gadget
    report(caller_locations(0), [["Kernel#sleep", nil, nil]]); sleep
  end
end
threads << Thread.new { Thread.current.name = "required"; SleepyHelper.nap(REPORT) }
# Threads that are born and die all the time, to be read mid-change.
churn = Thread.new { Thread.current.name = "churn"; loop { Thread.new { 1 + 1 }.join } } if ENV["RBSCOPE_CHURN"]

reports = threads.map { $reports.pop }
# Wait until every thread that blocks is really blocked.
blockers = threads.reject { |t| t.name == "cruncher" }
sleep 0.01 until blockers.all? { |t| t.status == "sleep" }
statuses = Thread.list.to_h { |t| [t.name || (t == Thread.main ? "main" : "?"), t.status] }

main_frames = nil
File.write(out + ".tmp", "") # claim the name early
report_main = lambda do |locs|
  main_frames = locs.map { |l| [l.label, l.absolute_path || l.path, l.lineno] }
  doc = { "pid" => Process.pid, "version" => RUBY_VERSION, "statuses" => statuses,
          "thread_names" => Thread.list.map(&:name),
          "threads" => reports + [{ "name" => nil, "main" => true, "tid" => Thread.main.native_thread_id,
                                    "top" => [["Kernel#sleep", nil, nil]], "frames" => main_frames }] }
  File.write(out + ".tmp", JSON.generate(doc))
  File.rename(out + ".tmp", out)
end
report_main.call(caller_locations(0)); sleep
