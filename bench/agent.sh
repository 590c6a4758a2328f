#!/usr/bin/env bash
# bench/agent.sh: the agent's own cost, beside a build of the code before
# the one-loop agent (BENCH_BASELINE) measured in the same run. For N
# idle-ish Ruby processes (each wakes 100 times a second to do a little
# work, as a quiet Puma worker does; 10 times a second from 200 on, so
# that the host keeps up with them) it runs `rbscope agent` at 100 Hz for
# BENCH_SECONDS and prints the agent's CPU (its threads' time on a CPU over wall time, in
# % of one core) and peak RSS, baseline and now, their ratio, and the
# targets: 10 processes at most 1% of a core, 50 at most 4% and 48 MB.
# The agent pushes to a server that does not answer: its queue and retries
# are part of the cost. A second table gives, on the same processes, the
# whole cost of this build's agent with each profile set and sampler:
# `--profile cpu` and `--profile cpu,wall` with the user-space sampler and
# with `--ebpf` (the BPF sampler): the agent's own CPU and RSS, and its BPF
# programs' run time (which the kernel spends in other tasks' time: the
# CPUs' clock interrupts, and for wall every context switch of the host;
# it turns kernel.bpf_stats_enabled on for the run), against issue 37's
# targets (10 processes at most 1% of a core, 50 at most 3%).
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
# BENCH_AGENT_FLAGS (more flags of every agent measured), BENCH_WAKE (seconds between a process's wakes;
# default 0.01, 0.1 from 200 processes on),
# RBSCOPE_BIN=bin/rbscope (the binary measured), BENCH_BASELINE=2495828 (the
# commit built as the baseline; empty skips it), BENCH_EBPF=1 (0 skips the
# table of the whole cost)
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
EBPF=${BENCH_EBPF:-1}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
die() { echo "bench/agent.sh: $*" >&2; exit 1; }
[[ -x $RUBY ]] || die "no Ruby at $RUBY (set RUBY)"
if [[ ! -x $BIN ]]; then
  "$GO" build -o "$BIN" ./cmd/rbscope || die "go build failed"
fi
PIDS=()
AGENT=
WORK=$(mktemp -d)
# STATS is kernel.bpf_stats_enabled as it was before the run turned it on
# (empty: untouched), put back however the run ends.
STATS=
cleanup() {
  [[ -n $STATS ]] && echo "$STATS" >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null || true
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
# cpuns prints the CPU time, in ns, of process $1's threads (the
# scheduler's count, /proc/PID/task/TID/schedstat): exact where the
# clock-tick count of /proc/PID/stat (10 ms a tick) is off by a few
# ticks in 15 s, a tenth of a percent of a core. The agent's threads live
# as long as it does (the Go runtime keeps its threads), so none is lost.
cpuns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d", s }'; }
# bpfns prints the run time, in ns, of the BPF programs process $1 holds
# (the kernel counts it while kernel.bpf_stats_enabled is 1).
bpfns() { cat /proc/"$1"/fdinfo/* 2>/dev/null | awk '/^run_time_ns:/ { s += $2 } END { printf "%d", s }'; }
# measure BIN N [FLAGS...]: runs the agent of BIN (with FLAGS) on the N
# processes running and prints "CPU% RSS-MB BPF%": its own CPU, its peak
# RSS, and the run time of its BPF programs (with --ebpf), which the
# kernel spends in the CPUs' clock interrupts, in other tasks' time.
measure() {
  local bin=$1
  shift 2
  # shellcheck disable=SC2086 # BENCH_AGENT_FLAGS are words
  "$bin" agent --server http://127.0.0.1:9 --match "$MARK" --rate 100 --upload-interval 5s ${BENCH_AGENT_FLAGS:-} "$@" 2>"$WORK/measure.log" &
  AGENT=$!
  sleep 6 # discovery and attach
  if ! kill -0 "$AGENT" 2>/dev/null; then
    AGENT=
    echo "- - -"
    return
  fi
  local t0 s0 b0 t1 s1 b1 rss
  t0=$(cpuns "$AGENT"); s0=$(date +%s.%N); b0=$(bpfns "$AGENT")
  sleep "$SECONDS_EACH"
  t1=$(cpuns "$AGENT"); s1=$(date +%s.%N); b1=$(bpfns "$AGENT")
  rss=$(awk '/VmHWM/ { print $2 }' "/proc/$AGENT/status")
  kill "$AGENT"; wait "$AGENT" 2>/dev/null || true; AGENT=
  awk -v t="$((t1 - t0))" -v a="$s0" -v b="$s1" -v rss="$rss" -v ns="$((b1 - b0))" 'BEGIN { printf "%.2f %.1f %.3f", 100 * t / 1e9 / (b - a), rss / 1024, 100 * ns / 1e9 / (b - a) }'
}
EBPF_ROWS=()
printf '%-10s %14s %10s %8s %14s %10s %s\n' processes "baseline CPU%" "now CPU%" ratio "baseline MB" "now MB" target
for n in $COUNTS; do
  pause=0.01
  (( n >= 200 )) && pause=0.1
  [[ -n ${BENCH_WAKE:-} ]] && pause=$BENCH_WAKE
  for ((i = 0; i < n; i++)); do
    "$RUBY" -e "loop { 200.times { |i| i * i }; sleep $pause }" "$MARK" >/dev/null 2>&1 &
    PIDS+=($!)
  done
  sleep 1
  base="- - -"
  [[ -n $BASEBIN ]] && base=$(measure "$BASEBIN" "$n")
  now=$(measure "$BIN" "$n")
  costs=()
  if [[ $EBPF == 1 ]]; then
    [[ -z $STATS ]] && STATS=$(cat /proc/sys/kernel/bpf_stats_enabled 2>/dev/null || echo 0)
    echo 1 >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null || true
    costs+=("cpu|$now")
    costs+=("cpu,wall|$(measure "$BIN" "$n" --profile cpu,wall)")
    costs+=("--ebpf cpu|$(measure "$BIN" "$n" --ebpf)")
    costs+=("--ebpf cpu,wall|$(measure "$BIN" "$n" --ebpf --profile cpu,wall)")
    echo "$STATS" >/proc/sys/kernel/bpf_stats_enabled 2>/dev/null || true
  fi
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
  read -r bcpu brss _ <<<"$base"
  read -r ncpu nrss _ <<<"$now"
  awk -v n="$n" -v bc="$bcpu" -v nc="$ncpu" -v br="$brss" -v nr="$nrss" 'BEGIN {
    ratio = (bc == "-" || nc == 0) ? "-" : sprintf("%.1fx", bc / nc)
    target = "-"
    if (n == 10) target = (nc <= 1.0 ? "MET" : "MISSED") " (<= 1% CPU)"
    if (n == 50) target = (nc <= 4.0 && nr <= 48 ? "MET" : "MISSED") " (<= 4% CPU, <= 48 MB)"
    if (n >= 200) target = "keeps up at " nc "% of a core"
    printf "%-10d %14s %10.2f %8s %14s %10.1f %s\n", n, bc, nc, ratio, br, nr, target }'
  for c in "${costs[@]}"; do
    read -r ccpu crss cbpf <<<"${c#*|}"
    EBPF_ROWS+=("$(awk -v n="$n" -v what="${c%%|*}" -v c="$ccpu" -v r="$crss" -v bp="$cbpf" 'BEGIN {
      if (c == "-") { printf "%-10d %-16s (the agent exited: --ebpf needs root in the host PID namespace)", n, what; exit }
      all = c + bp
      target = "-"
      if (n == 10) target = (all <= 1.0 ? "MET" : "MISSED") " (<= 1% CPU)"
      if (n == 50) target = (all <= 3.0 ? "MET" : "MISSED") " (<= 3% CPU)"
      if (n >= 200) target = "keeps up at " all "% of a core"
      printf "%-10d %-16s %10.2f %10.3f %10.2f %8.1f %s", n, what, c, bp, all, r, target }')")
  done
done
if [[ $EBPF == 1 ]]; then
  echo
  echo "the whole cost of this build's agent, by profiles and sampler: its own CPU, its BPF programs' run time (in other tasks' time: the CPUs' clock interrupts, and with wall every context switch of the host), their sum against issue 37's targets"
  printf '%-10s %-16s %10s %10s %10s %8s %s\n' processes profiles "agent CPU%" "BPF prog%" "all%" "MB" target
  for r in "${EBPF_ROWS[@]}"; do echo "$r"; done
fi

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
# workers_memory [FLAGS...] profiles the master and its workers with the
# agent (and FLAGS) and prints its peak RSS and Go heap.
workers_memory() {
  "$BIN" agent --server http://127.0.0.1:9 --match "$MARK" --rate 100 --upload-interval 5s --metrics-addr "127.0.0.1:$PORT" "$@" 2>"$WORK/agent.log" &
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
  printf 'one Ruby (%s) and %d forked workers, %d s: agent%s peak RSS %.1f MB, Go heap in use (max) %.1f MB\n' \
    "$("$RUBY" -e 'print RUBY_VERSION')" "${#workers[@]}" "$SECONDS_EACH" "${1:+ $1}" "$(awk -v k="$rss" 'BEGIN { print k / 1024 }')" "$(awk -v b="$heap" 'BEGIN { print b / 1048576 }')"
}
workers_memory
if [[ $EBPF == 1 ]]; then
  workers_memory --ebpf
fi
