# A program for `rbscope exec` to run code in. ARGV[1] picks what its main
# thread does: "sleep", "io" (blocked reading a pipe), "cpu" (floating-point
# work it checks), "threads" (busy and blocked threads, main in join) or
# "gvl" (another thread holds the GVL in C for 4 s) or "shadow" (main waits
# inside a module whose constants shadow the core ones). Every worker checks its
# own results and aborts on a wrong one, so a register that rbscope failed
# to restore shows as a dead process. When ready it writes ARGV[0]:
# {"pid": ...}; $progress counts the work done since.
require "json"
require "fiddle"

$stdout.sync = true
$answer = 42
$progress = 0
top_local = "visible"

def check_floats(n)
  s = 0.0
  1.upto(n) { |i| s += 1.0 / (i * i) }
  abort "float corrupted: #{s}" unless (s - 1.6448340718480652).abs < 1e-12
end

def ready
  File.write(ARGV[0] + ".tmp", JSON.generate({ "pid" => Process.pid }))
  File.rename(ARGV[0] + ".tmp", ARGV[0])
end

case ARGV.fetch(1)
when "sleep"
  ready
  loop { sleep 0.2; $progress += 1 }
when "io"
  r, w = IO.pipe
  sent = 0
  Thread.new { loop { sleep 0.2; w.puts(sent += 1) } }
  ready
  while (line = r.gets)
    abort "io corrupted: #{line.inspect} after #{$progress}" unless line.to_i == $progress + 1
    $progress += 1
  end
when "cpu"
  ready
  loop { check_floats(10_000); $progress += 1 }
when "threads"
  q = Queue.new
  workers = 2.times.map { Thread.new { loop { check_floats(10_000); $progress += 1 } } }
  Thread.new { loop { q.pop } }
  Thread.new { loop { sleep 0.1 } }
  ready
  workers.each(&:join)
when "gvl"
  usleep = Fiddle::Function.new(Fiddle::Handle::DEFAULT["usleep"], [Fiddle::TYPE_INT], Fiddle::TYPE_INT, need_gvl: true)
  ready
  Thread.new { usleep.call(4_000_000) }
  loop { sleep 0.2; $progress += 1 }
when "shadow"
  # Code Ruby runs from a postponed job (rb_eval_string) resolves constants
  # in the lexical scope of the frame it interrupted: this one's constants
  # shadow every core constant rbscope's code names.
  module Shadow
    %i[Encoding Thread IO Exception Errno Kernel ObjectSpace GC Process Object Module Array
       TOPLEVEL_BINDING].each { |c| const_set(c, ::Module.new) }
    def self.wait
      loop { sleep 0.2; $progress += 1 }
    end
  end
  ready
  Shadow.wait
else
  abort "unknown mode #{ARGV[1]}"
end
