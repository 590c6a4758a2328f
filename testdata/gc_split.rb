# A workload with a known share of its CPU time in the garbage collector:
# each round runs GC.start (a full mark and sweep of a large live graph,
# so the marking takes most of it) and then Ruby arithmetic that allocates
# nothing. Writes {"pid": PID} to ARGV[0] when it starts; runs ARGV[1]
# seconds (default 30).
#
# It measures the CPU time each part really got with its own thread CPU
# clock; on SIGUSR1 it writes {"seq": N, "cpu": {"gc": s, "work": s}} (N
# the signals received) to ARGV[0].cpu at the end of the round, as
# split.rb does, so a test compares the profile's share of
# (garbage collection) samples with what the program measured over the
# same window.
require "json"
require_relative "lib/cpu_report"

# Objects for the GC to mark: arrays and strings, 200k of each.
LIVE = Array.new(200_000) { |i| [i, "s#{i}"] }

def burn
  i = 0
  i += 1 while i < 1_600_000
end

seconds = Float(ARGV.fetch(1, "30"))
deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
File.write(ARGV.fetch(0) + ".tmp", JSON.generate({ "pid" => Process.pid }))
File.rename(ARGV.fetch(0) + ".tmp", ARGV.fetch(0))
loop do
  timed("gc") { GC.start }
  timed("work") { burn }
  answer(ARGV.fetch(0) + ".cpu")
  break if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
end
