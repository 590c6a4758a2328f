# Two threads that only run Ruby code ("spin-a" and "spin-b"), so that at
# any moment one holds the GVL and the other waits for it (Ruby hands the
# lock over every 100 ms or so), while the main thread sleeps in join.
# Writes {"pid": PID} to ARGV[0] once both run; runs ARGV[1] seconds
# (default 30).
require "json"

def spin(deadline)
  x = 0
  x += 1 while Process.clock_gettime(Process::CLOCK_MONOTONIC) < deadline
end

seconds = Float(ARGV.fetch(1, "30"))
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
threads = %w[spin-a spin-b].map do |name|
  Thread.new { Thread.current.name = name; spin(deadline) }
end
sleep 0.01 until threads.all? { |t| t.status == "run" }
File.write(ARGV.fetch(0) + ".tmp", JSON.generate({ "pid" => Process.pid }))
File.rename(ARGV.fetch(0) + ".tmp", ARGV.fetch(0))
threads.each(&:join)
