# A workload whose stack changes all the time, for checking that a sample
# read while the thread runs is never a mix of two moments: the main thread
# alternates between two call chains of the same depth,
#
#   churn -> block in churn -> Integer#times -> block in churn -> mid_a -> leaf_a
#   churn -> block in churn -> Integer#times -> block in churn -> mid_b -> Array#map -> block in mid_b -> leaf_b
#
# so that leaf_a is only ever called from mid_a, leaf_b only from the block
# in mid_b, and so on; a torn read would show a frame under the wrong
# caller. Writes {"pid": PID} to ARGV[0] when it starts and runs ARGV[1]
# seconds (default 30).
require "json"

def leaf_a(x); x + 1; end
def leaf_b(x); x + 2; end
def mid_a(x); leaf_a(x); end
def mid_b(x); [x].map { |y| leaf_b(y) }.first; end

def churn(seconds)
  deadline = Process.clock_gettime(Process::CLOCK_MONOTONIC) + seconds
  loop do
    1000.times { |i| mid_a(i); mid_b(i) }
    break if Process.clock_gettime(Process::CLOCK_MONOTONIC) > deadline
  end
end

seconds = Float(ARGV.fetch(1, "30"))
File.write(ARGV.fetch(0) + ".tmp", JSON.generate({ "pid" => Process.pid }))
File.rename(ARGV.fetch(0) + ".tmp", ARGV.fetch(0))
churn(seconds)
