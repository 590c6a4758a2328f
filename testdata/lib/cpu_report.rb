# What split.rb and gc_split.rb share: each part of a round is timed with
# the thread's own CPU clock (timed), and on SIGUSR1 the totals so far are
# written as {"seq": N, "cpu": {part: seconds}} (N the signals received) to
# a file at the end of the round (answer), so that a test compares a
# profile with what the program measured over the same window.
require "json"

CPU = Hash.new(0.0)
$asked = 0
$answered = 0
trap("USR1") { $asked += 1 }

def timed(part)
  t0 = Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID)
  yield
  CPU[part] += Process.clock_gettime(Process::CLOCK_THREAD_CPUTIME_ID) - t0
end

def answer(path)
  return if $answered == $asked
  $answered = $asked
  File.write(path + ".tmp", JSON.generate({ "seq" => $answered, "cpu" => CPU }))
  File.rename(path + ".tmp", path)
end
