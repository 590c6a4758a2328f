#!/usr/bin/env bash
# bench/agent.sh: the agent's own cost, beside a build of the code before
# the one-loop agent (BENCH_BASELINE) measured in the same run. For N
# idle-ish Ruby processes (each wakes 100 times a second to do a little
# work, as a quiet Puma worker does; 10 times a second from 200 on, so
# that the host keeps up with them) it runs `rbscope agent` at 100 Hz for
# BENCH_SECONDS and prints the agent's CPU (user+system over wall time, in
# % of one core) and peak RSS, baseline and now, their ratio, and the
# targets: 10 processes at most 1% of a core, 50 at most 4% and 48 MB.
# The agent pushes to a server that does not answer: its queue and retries
# are part of the cost.
#
# Then, as a preforking server runs, one Ruby forks BENCH_WORKERS (50)
# workers (testdata/bench_workers.rb) and the agent profiles the master and
# its workers: it prints the agent's peak RSS and the Go heap in use (the
# largest of its go_memstats_heap_inuse_bytes, read every second from its
# --metrics-addr), the memory that grows with processes of one Ruby.
#
#   bench/agent.sh
#
# Environment: BENCH_COUNTS="10 50 200", BENCH_SECONDS=20, BENCH_WORKERS=50
# (0 skips the forked workers), BENCH_METRICS_PORT=19464, RUBY=/usr/bin/ruby,
# RBSCOPE_BIN=bin/rbscope (the binary measured), BENCH_BASELINE=2495828 (the
# commit built as the baseline; empty skips it)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
COUNTS=${BENCH_COUNTS:-10 50 200}
WORKERS=${BENCH_WORKERS:-50}
PORT=${BENCH_METRICS_PORT:-19464}
SECONDS_EACH=${BENCH_SECONDS:-20}
RUBY=${RUBY:-/usr/bin/ruby}
BIN=${RBSCOPE_BIN:-$ROOT/bin/rbscope}
BASELINE=${BENCH_BASELINE-2495828}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
die() { echo "bench/agent.sh: $*" >&2; exit 1; }
[[ -x $RUBY ]] || die "no Ruby at $RUBY (set RUBY)"
if [[ ! -x $BIN ]]; then
  "$GO" build -o "$BIN" ./cmd/rbscope || die "go build failed"
fi
PIDS=()
AGENT=
WORK=$(mktemp -d)
cleanup() {
  [[ -n $AGENT ]] && kill "$AGENT" 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
MARK="agentbench$$"
BASEBIN=
if [[ -n $BASELINE ]]; then
  git worktree add -q --detach "$WORK/baseline" "$BASELINE" || die "cannot check out $BASELINE"
  (cd "$WORK/baseline" && "$GO" build -o "$WORK/rbscope-baseline" ./cmd/rbscope) || die "cannot build $BASELINE"
  git worktree remove --force "$WORK/baseline"
  BASEBIN=$WORK/rbscope-baseline
fi
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
# measure BIN N: runs the agent of BIN on the N processes running and
# prints "CPU% RSS-MB".
measure() {
  "$1" agent --server http://127.0.0.1:9 --match "$MARK" --rate 100 --upload-interval 5s 2>/dev/null &
  AGENT=$!
  sleep 6 # discovery and attach
  local t0 s0 t1 s1 rss
  t0=$(ticks "$AGENT"); s0=$(date +%s.%N)
  sleep "$SECONDS_EACH"
  t1=$(ticks "$AGENT"); s1=$(date +%s.%N)
  rss=$(awk '/VmHWM/ { print $2 }' "/proc/$AGENT/status")
  kill "$AGENT"; wait "$AGENT" 2>/dev/null || true; AGENT=
  awk -v t="$((t1 - t0))" -v hz="$hz" -v a="$s0" -v b="$s1" -v rss="$rss" 'BEGIN { printf "%.2f %.1f", 100 * t / hz / (b - a), rss / 1024 }'
}
printf '%-10s %14s %10s %8s %14s %10s %s\n' processes "baseline CPU%" "now CPU%" ratio "baseline MB" "now MB" target
for n in $COUNTS; do
  pause=0.01
  (( n >= 200 )) && pause=0.1
  for ((i = 0; i < n; i++)); do
    "$RUBY" -e "loop { 200.times { |i| i * i }; sleep $pause }" "$MARK" >/dev/null 2>&1 &
    PIDS+=($!)
  done
  sleep 1
  base="- -"
  [[ -n $BASEBIN ]] && base=$(measure "$BASEBIN")
  now=$(measure "$BIN")
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  read -r bcpu brss <<<"$base"
  read -r ncpu nrss <<<"$now"
  awk -v n="$n" -v bc="$bcpu" -v nc="$ncpu" -v br="$brss" -v nr="$nrss" 'BEGIN {
    ratio = (bc == "-" || nc == 0) ? "-" : sprintf("%.1fx", bc / nc)
    target = "-"
    if (n == 10) target = (nc <= 1.0 ? "MET" : "MISSED") " (<= 1% CPU)"
    if (n == 50) target = (nc <= 4.0 && nr <= 48 ? "MET" : "MISSED") " (<= 4% CPU, <= 48 MB)"
    if (n >= 200) target = "keeps up at " nc "% of a core"
    printf "%-10d %14s %10.2f %8s %14s %10.1f %s\n", n, bc, nc, ratio, br, nr, target }'
done

(( WORKERS > 0 )) || exit 0
# metric NAME prints the agent's metric NAME (a whole number), or nothing.
metric() {
  curl -s --max-time 2 "http://127.0.0.1:$PORT/metrics" | awk -v n="$1" '$1 == n { printf "%d", $2 }'
}
"$RUBY" "$ROOT/testdata/bench_workers.rb" "$WORKERS" "$WORK/workers" "$MARK" >/dev/null 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do
  [[ -s $WORK/workers ]] && break
  sleep 0.05
done
[[ -s $WORK/workers ]] || die "the $WORKERS workers did not start within 15 s"
mapfile -t workers <"$WORK/workers"
"$BIN" agent --server http://127.0.0.1:9 --match "$MARK" --rate 100 --upload-interval 5s --metrics-addr "127.0.0.1:$PORT" 2>"$WORK/agent.log" &
AGENT=$!
sleep 6 # discovery and attach
heap=0 procs=0
for ((s = 0; s < SECONDS_EACH; s++)); do
  h=$(metric go_memstats_heap_inuse_bytes)
  [[ -n $h ]] && (( h > heap )) && heap=$h
  p=$(metric rbscope_agent_processes)
  [[ -n $p ]] && (( p > procs )) && procs=$p
  sleep 1
done
kill -0 "$AGENT" 2>/dev/null || die "the agent exited: $(cat "$WORK/agent.log")"
rss=$(awk '/VmHWM/ { print $2 }' "/proc/$AGENT/status")
kill "$AGENT"; wait "$AGENT" 2>/dev/null || true; AGENT=
(( heap > 0 )) || die "no go_memstats_heap_inuse_bytes from the agent's metrics: $(cat "$WORK/agent.log")"
(( procs == ${#workers[@]} + 1 )) || die "the agent profiled $procs processes, not the master and its ${#workers[@]} workers: $(cat "$WORK/agent.log")"
printf 'one Ruby (%s) and %d forked workers, %d s: agent peak RSS %.1f MB, Go heap in use (max) %.1f MB\n' \
  "$("$RUBY" -e 'print RUBY_VERSION')" "${#workers[@]}" "$SECONDS_EACH" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" "$(awk -v b="$heap" 'BEGIN { print b / 1048576 }')"
