#!/usr/bin/env bash
# bench/agent.sh: the agent's own cost. For N idle-ish Ruby processes (each
# wakes 100 times a second to do a little work, as a quiet Puma worker does)
# it runs `rbscope agent` at 100 Hz for BENCH_SECONDS and prints the agent's
# CPU per profiled process (user+system over wall time) and its memory
# (peak RSS), for N = 1, 10 and 50 (BENCH_COUNTS). The agent pushes to a
# server that does not answer: its queue and retries are part of the cost.
#
#   bench/agent.sh
#
# Environment: BENCH_COUNTS="1 10 50", BENCH_SECONDS=20, RUBY=/usr/bin/ruby
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
COUNTS=${BENCH_COUNTS:-1 10 50}
SECONDS_EACH=${BENCH_SECONDS:-20}
RUBY=${RUBY:-/usr/bin/ruby}
BIN=$ROOT/bin/rbscope
die() { echo "bench/agent.sh: $*" >&2; exit 1; }
[[ -x $RUBY ]] || die "no Ruby at $RUBY (set RUBY)"
if [[ ! -x $BIN ]]; then
  GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
  "$GO" build -o "$BIN" ./cmd/rbscope || die "go build failed"
fi
PIDS=()
AGENT=
cleanup() {
  [[ -n $AGENT ]] && kill "$AGENT" 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
MARK="agentbench$$"
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
printf '%-10s %14s %14s %12s\n' processes "agent CPU %" "per process %" "peak RSS MB"
for n in $COUNTS; do
  for ((i = 0; i < n; i++)); do
    "$RUBY" -e 'loop { 200.times { |i| i * i }; sleep 0.01 }' "$MARK" >/dev/null 2>&1 &
    PIDS+=($!)
  done
  sleep 1
  "$BIN" agent --server http://127.0.0.1:9 --match "$MARK" --rate 100 --upload-interval 5s 2>/dev/null &
  AGENT=$!
  sleep 6 # discovery and attach
  t0=$(ticks "$AGENT"); s0=$(date +%s.%N)
  sleep "$SECONDS_EACH"
  t1=$(ticks "$AGENT"); s1=$(date +%s.%N)
  rss=$(awk '/VmHWM/ { print $2 }' "/proc/$AGENT/status")
  kill "$AGENT"; wait "$AGENT" 2>/dev/null || true; AGENT=
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  awk -v t="$((t1 - t0))" -v hz="$hz" -v a="$s0" -v b="$s1" -v n="$n" -v rss="$rss" 'BEGIN {
    cpu = 100 * t / hz / (b - a); printf "%-10d %14.1f %14.2f %12.1f\n", n, cpu, cpu / n, rss / 1024 }'
done
