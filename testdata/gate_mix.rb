# Two threads that switch between running and sleeping, for the tests of
# the agent's gate (a tick reads a process only when one of its threads is
# on a CPU): "rubyist" runs Ruby code (ruby_work) in bursts of a few
# milliseconds, "deflater" C code that releases the GVL (Zlib.deflate,
# under c_work), each sleeping a few milliseconds between bursts, as a
# quiet server's threads do. Each thread adds the CPU time of its bursts,
# by its own thread CPU clock, and the program rewrites ARGV[0] (via a
# rename) every 20 ms with {"pid", "ruby", "c"}: the seconds of CPU each
# kind of burst has had so far. Runs ARGV[1] seconds (default 60).
require "json"
require "zlib"

out = ARGV.fetch(0)
seconds = Float(ARGV.fetch(1, "60"))
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
$cpu = { "ruby" => 0.0, "c" => 0.0 }
$lock = Mutex.new

def thread_cpu
  Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
end

def ruby_work(n)
  x = 0
  n.times { |i| x += i * i }
  x
end

def c_work(data)
  Zlib.deflate(data)
end

def burst(kind)
  t0 = thread_cpu
  yield
  used = thread_cpu - t0
  $lock.synchronize { $cpu[kind] += used }
end

data = Random.new(1).bytes(1 << 16)
threads = [
  Thread.new do
    Thread.current.name = "rubyist"
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      burst("ruby") { ruby_work(20_000) }
      sleep 0.003
    end
  end,
  Thread.new do
    Thread.current.name = "deflater"
    while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
      burst("c") { c_work(data) }
      sleep 0.002
    end
  end,
]
while threads.any?(&:alive?)
  doc = $lock.synchronize { { "pid" => Process.pid, "ruby" => $cpu["ruby"], "c" => $cpu["c"] } }
  File.write(out + ".tmp", JSON.generate(doc))
  File.rename(out + ".tmp", out)
  sleep 0.02
end
