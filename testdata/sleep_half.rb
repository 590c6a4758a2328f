# Spends about half its wall time computing (Object#compute, 40 ms a
# round) and half asleep (Object#nap), and measures each half with its own
# monotonic clock: every round it rewrites ARGV[0] with
# {"pid", "compute", "nap"} (seconds of wall time so far). ARGV[1] is a
# marker for the agent's --match.
require "json"

def compute(seconds)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
  x
end

def nap(seconds)
  sleep seconds
end

out = ARGV.fetch(0)
spent = { "compute" => 0.0, "nap" => 0.0 }
clock = -> { Process.clock_gettime(Process::CLOCK_MONOTONIC) }
loop do
  t0 = clock.call
  compute(0.04)
  t1 = clock.call
  nap(0.04)
  t2 = clock.call
  spent["compute"] += t1 - t0
  spent["nap"] += t2 - t1
  File.write(out + ".tmp", JSON.generate(spent.merge("pid" => Process.pid)))
  File.rename(out + ".tmp", out)
end
