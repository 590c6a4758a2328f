# The workload of bench/stack.sh and the Go benchmarks in bench/: a process
# whose main thread sits at the bottom of a recursion BENCH_DEPTH frames deep
# (method bench_deep, so `rbscope stack` prints exactly DEPTH lines starting
# with "bench_deep"), plus three other threads blocked in ordinary ways, so a
# read is a realistic whole-process dump.
#
#   ruby testdata/bench_deep.rb READY_FILE [DEPTH] [sleep|spin]
#
# When every thread is in place it writes {"pid", "depth", "version",
# "threads"} as JSON to READY_FILE (atomically, via a rename). At the bottom
# the main thread sleeps, or with "spin" runs a busy loop (holding the GVL).
require "json"

ready = ARGV.fetch(0)
depth = Integer(ARGV.fetch(1, "200"))
mode = ARGV.fetch(2, "sleep")
abort "depth must be >= 1" if depth < 1
abort "mode must be sleep or spin" unless %w[sleep spin].include?(mode)

$parked = Queue.new

threads = []
threads << Thread.new { Thread.current.name = "sleeper"; $parked << 1; sleep }
jobs = Queue.new
threads << Thread.new { Thread.current.name = "queue-waiter"; $parked << 1; jobs.pop }
threads << Thread.new do
  Thread.current.name = "ticker"
  $parked << 1
  loop { sleep 0.05 }
end
threads.size.times { $parked.pop }
sleep 0.01 until threads.all? { |t| t.status == "sleep" }

def bench_ready(path, depth, mode)
  doc = { "pid" => Process.pid, "depth" => depth, "mode" => mode, "version" => RUBY_VERSION,
          "threads" => Thread.list.size }
  File.write(path + ".tmp", JSON.generate(doc))
  File.rename(path + ".tmp", path)
end

# bench_deep(n) recurses until n == 1, so bench_deep(depth) leaves exactly
# depth bench_deep frames on the stack.
def bench_deep(n, ready, depth, mode)
  if n > 1
    bench_deep(n - 1, ready, depth, mode)
  else
    bench_ready(ready, depth, mode)
    if mode == "spin"
      x = 0
      x += 1 while true
    else
      sleep
    end
  end
end

bench_deep(depth, ready, depth, mode)
