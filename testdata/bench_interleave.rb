# testdata/split.rb's work (the same methods, loaded from split.rb) run
# round after round in one process, for measuring a profiler's cost on the
# target by alternating windows with and without it (bench/interleave.py):
#
#   ruby testdata/bench_interleave.rb READY_JSON RESULT_JSON
#
# Writes {"pid", "stackprof"} to READY_JSON once running, then runs rounds of
# chain_a/chain_b/chain_c until SIGTERM and writes to RESULT_JSON
# {"pid", "ends"}: the CLOCK_MONOTONIC second at which each round ended
# (the clock Python's time.monotonic() reads, so the driver's windows and
# these times are on one axis).
#
# SIGUSR1 starts stackprof in-process (mode :cpu, 10 ms: 100 Hz, the peer)
# and SIGUSR2 stops it, so the peer's cost is measured the same way, in the
# same process. Needs the stackprof gem only when sent SIGUSR1.
require "json"
require_relative "bench_split_defs"

ready, out = ARGV.fetch(0), ARGV.fetch(1)
stop = false
trap("TERM") { stop = true }
begin
  require "stackprof" # before any trap: a trap handler cannot require
rescue LoadError
  nil
end
trap("USR1") { StackProf.start(mode: :cpu, interval: 10_000) if defined?(StackProf) }
trap("USR2") { StackProf.stop if defined?(StackProf) }

ends = []
bench_write_json(ready, { "pid" => Process.pid, "stackprof" => !!defined?(StackProf) })
until stop
  split_rounds(1)
  ends << Process.clock_gettime(Process::CLOCK_MONOTONIC)
end
bench_write_json(out, { "pid" => Process.pid, "ends" => ends })
