#!/usr/bin/env bash
# bench/alloc.sh: what `rbscope alloc` costs the target, and how its answer
# compares with the in-process memory_profiler gem's, in one run.
#
# The workload (testdata/bench_alloc.rb) runs rounds as fast as it can that
# keep 1,000 Strings at one line and 100 at another and throw away 10,000
# at a third, logging its round count against CLOCK_MONOTONIC.
#
#   1. rbscope: the workload's throughput (rounds/s) for BENCH_S seconds
#      before, during an `rbscope alloc -d BENCH_S` window, and after; the
#      slowdown while tracing is on is during / mean(before, after). Also the
#      time `rbscope alloc` takes beyond the window (safe point, GC, walk).
#   2. memory_profiler (Debian ruby-memory-profiler): the same workload
#      measures itself for BENCH_S seconds without, then inside
#      MemoryProfiler.report.
#   Both answers (the two kept lines' counts; the third must be absent) are
#   printed side by side.
#
#   bench/alloc.sh
#
# Environment: BENCH_S=5 (seconds per phase), RUBY=/usr/bin/ruby,
# RBSCOPE=path of a built rbscope (default: build the tree with Go).
set -uo pipefail
cd "$(dirname "$0")/.."
S=${BENCH_S:-5}
RUBY=${RUBY:-/usr/bin/ruby}
WORK=$(mktemp -d)
trap 'kill $PID 2>/dev/null; rm -rf "$WORK"' EXIT
die() { echo "bench/alloc.sh: $*" >&2; exit 1; }
[[ $S =~ ^[0-9]+$ ]] && (( S >= 2 )) || die "BENCH_S must be a whole number >= 2, got '$S'"

if [[ -z ${RBSCOPE:-} ]]; then
  RBSCOPE=$WORK/rbscope
  go build -o "$RBSCOPE" ./cmd/rbscope || die "go build failed"
fi
if ! $RUBY -rmemory_profiler -e 1 2>/dev/null; then
  if [[ $(id -u) == 0 ]]; then
    apt-get install -y -qq ruby-memory-profiler >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq ruby-memory-profiler >/dev/null; }
  fi
  $RUBY -rmemory_profiler -e 1 2>/dev/null || die "the memory_profiler gem is missing (Debian: apt-get install ruby-memory-profiler)"
fi
mono() { python3 -c 'import time; print(time.monotonic())'; }

echo "== $($RUBY -v)"
LOG=$WORK/rounds.log
$RUBY testdata/bench_alloc.rb "$LOG" & PID=$!
sleep 2
T0=$(mono); sleep "$S"; T1=$(mono)
"$RBSCOPE" alloc -p $PID -d "${S}s" --json >"$WORK/alloc.json" 2>"$WORK/alloc.err" || die "rbscope alloc failed: $(cat "$WORK/alloc.err")"
T3=$(mono)
sleep 0.5; T4=$(mono); sleep "$S"; T5=$(mono)
kill $PID; wait $PID 2>/dev/null

$RUBY testdata/bench_alloc.rb - memory_profiler "$S" >"$WORK/mp.txt" || die "the memory_profiler run failed"

python3 - "$LOG" "$WORK/alloc.json" "$WORK/mp.txt" "$T0" "$T1" "$T3" "$T4" "$T5" "$S" <<'PY'
import json, sys, bisect
log, alloc, mp, t0, t1, t3, t4, t5, s = sys.argv[1:]
t0, t1, t3, t4, t5, s = map(float, (t0, t1, t3, t4, t5, s))
pts = [tuple(map(float, l.split())) for l in open(log) if l.strip()]
ts = [p[0] for p in pts]
def rounds_at(t):
    i = bisect.bisect_left(ts, t)
    i = min(max(i, 1), len(pts) - 1)
    (ta, ra), (tb, rb) = pts[i - 1], pts[i]
    return ra + (rb - ra) * (t - ta) / (tb - ta)
def rate(a, b): return (rounds_at(b) - rounds_at(a)) / (b - a)
# The window is the last s seconds before rbscope alloc returned, minus
# the stop's own time; use its middle to stay clear of both ends.
w_end = t3 - 0.3
w_start = w_end - s + 0.6
before, during, after = rate(t0, t1), rate(w_start, w_end), rate(t4, t5)
base = (before + after) / 2
sites = json.load(open(alloc))
mpl = {k: v for k, v in (l.split(" ", 1) for l in open(mp).read().splitlines())}
mp_off, mp_on = float(mpl["off"]), float(mpl["on"])
print(f"rbscope alloc: {before:.0f} rounds/s before, {during:.0f} while tracing, {after:.0f} after: "
      f"slowdown {100 * (1 - during / base):.1f}% while tracing on ({base / during:.2f}x)")
print(f"rbscope alloc: took {t3 - t1 - s:.2f}s beyond the {s:.0f}s window (attach, safe points, GC, heap walk)")
print(f"memory_profiler: {mp_off:.0f} rounds/s off, {mp_on:.0f} inside MemoryProfiler.report: "
      f"slowdown {100 * (1 - mp_on / mp_off):.1f}% ({mp_off / mp_on:.2f}x)")
print(f"cost ratio: memory_profiler slows the workload {(mp_off / mp_on) / (base / during):.1f}x as much as rbscope alloc")
top = [(x["count"], f'{x["file"]}:{x["line"]}:{x["class"]}') for x in sites[:3]]
print("rbscope alloc, alive after a full GC: " + "; ".join(f"{c} {l}" for c, l in top))
if len(sites) >= 2:
    print(f"  ratio of the two kept lines: {sites[0]['count'] / max(sites[1]['count'], 1):.2f} (expected 10)")
mpr = [l.split(" ", 2)[1:] for l in open(mp).read().splitlines() if l.startswith("retained")]
print("memory_profiler, retained: " + "; ".join(f"{c} {l}" for c, l in mpr[:3]))
if len(mpr) >= 2:
    print(f"  ratio of the two kept lines: {int(mpr[0][0]) / max(int(mpr[1][0]), 1):.2f} (expected 10)")
PY
