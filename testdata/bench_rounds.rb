# A fixed amount of testdata/split.rb's work (the same methods, loaded from
# split.rb), for timing a target's slowdown under a profiler:
#
#   ruby testdata/bench_rounds.rb ROUNDS RESULT_JSON [DELAY_S]
#
# Writes its pid to RESULT_JSON.pid at once, sleeps DELAY_S (default 0.5;
# the time a profiler launching it needs to attach; a sleeping thread is
# not sampled), then runs ROUNDS rounds of chain_a/chain_b/chain_c and
# writes {"pid", "rounds", "elapsed", "cpu"} to RESULT_JSON: the rounds' own
# CLOCK_MONOTONIC seconds and the process's CPU seconds over them. ROUNDS=0 calibrates instead: runs
# rounds for DELAY_S seconds (no sleep) and writes the rounds per second.
require "json"
require_relative "bench_split_defs"

rounds = Integer(ARGV.fetch(0))
out = ARGV.fetch(1)
delay = Float(ARGV.fetch(2, "0.5"))
File.write(out + ".pid", Process.pid.to_s)

if rounds.zero?
  n = 0
  t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
  while Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0 < delay
    split_rounds(1)
    n += 1
  end
  el = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
  bench_write_json(out, { "pid" => Process.pid, "rounds" => n, "elapsed" => el, "rounds_per_s" => n / el })
  exit
end

sleep delay
c0 = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID)
t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
split_rounds(rounds)
el = Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0
cpu = Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID) - c0
bench_write_json(out, { "pid" => Process.pid, "rounds" => rounds, "elapsed" => el, "cpu" => cpu })
