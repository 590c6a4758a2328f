#!/usr/bin/env bash
# bench/throughput.sh: what one sample costs rbscope, beside a build of an
# earlier commit (BENCH_BASELINE) measured in the same run. A Ruby thread
# spins at the bottom of a BENCH_DEPTH-deep recursion
# (testdata/bench_deep.rb; 3 more threads asleep), and each build records it
# for BENCH_SECONDS at 1000 Hz, --nonblocking and then paused, the builds
# taking turns BENCH_RUNS times. Per build and mode it prints the median of
# the samples per CPU-second of rbscope (user+system, GNU time, less the
# same for one `stack --nonblocking`, its start), the ratio now/baseline, and the target of 20,000 samples per
# CPU-second (--nonblocking). --rate caps at 1000 Hz, so the figure is a
# capacity: what one core could take.
#
#   bench/throughput.sh
#
# Environment: BENCH_BASELINE=8cbdf68 (empty: no baseline), BENCH_RUNS=3,
# BENCH_SECONDS=5, BENCH_DEPTH=50, RUBY=/usr/bin/ruby,
# RBSCOPE_BIN=bin/rbscope (the binary measured; built when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BASELINE=${BENCH_BASELINE-8cbdf68}
RUNS=${BENCH_RUNS:-3}
SECS=${BENCH_SECONDS:-5}
DEPTH=${BENCH_DEPTH:-50}
RUBY=${RUBY:-/usr/bin/ruby}
BIN=${RBSCOPE_BIN:-$ROOT/bin/rbscope}
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
TIME=/usr/bin/time
die() { echo "bench/throughput.sh: $*" >&2; exit 1; }
[[ -x $RUBY ]] || die "no Ruby at $RUBY (set RUBY)"
[[ -x $TIME ]] || die "GNU time is missing (Debian: apt-get install time)"
[[ -x $BIN ]] || "$GO" build -o "$BIN" ./cmd/rbscope || die "go build failed"
WORK=$(mktemp -d)
DPID=
cleanup() {
  [[ -n $DPID ]] && kill "$DPID" 2>/dev/null || true
  wait 2>/dev/null || true
  git worktree remove --force "$WORK/baseline" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
BUILDS=("now=$BIN")
if [[ -n $BASELINE ]]; then
  git worktree add -q --detach "$WORK/baseline" "$BASELINE" || die "cannot check out $BASELINE"
  (cd "$WORK/baseline" && "$GO" build -o "$WORK/rbscope-baseline" ./cmd/rbscope) || die "cannot build $BASELINE"
  git worktree remove --force "$WORK/baseline"
  BUILDS=("baseline=$WORK/rbscope-baseline" "${BUILDS[@]}")
fi
"$RUBY" "$ROOT/testdata/bench_deep.rb" "$WORK/ready.json" "$DEPTH" spin >"$WORK/deep.log" 2>&1 &
DPID=$!
for _ in $(seq 100); do [[ -s $WORK/ready.json ]] && break; sleep 0.1; done
[[ -s $WORK/ready.json ]] || die "bench_deep.rb did not start: $(tail -3 "$WORK/deep.log")"
for run in $(seq "$RUNS"); do
  for b in "${BUILDS[@]}"; do
    name=${b%%=*} bin=${b#*=}
    # The fixed cost (start, attach, find the VM, one read, print).
    "$TIME" -f '%e %U %S' -o "$WORK/$name-start-$run.time" "$bin" stack --nonblocking -p "$DPID" >/dev/null 2>"$WORK/$name-start-$run.err" ||
      die "$name stack failed: $(tail -3 "$WORK/$name-start-$run.err")"
    for mode in nonblocking paused; do
      flags=()
      [[ $mode == nonblocking ]] && flags=(--nonblocking)
      out=$WORK/$name-$mode-$run
      "$TIME" -f '%e %U %S' -o "$out.time" "$bin" record -p "$DPID" --rate 1000 --duration "${SECS}s" \
        -f collapsed -o "$out.txt" "${flags[@]}" 2>"$out.err" || die "$name record ($mode) failed: $(tail -3 "$out.err")"
    done
  done
done
python3 - "$WORK" "$RUNS" "$DEPTH" "$(cat "$WORK/ready.json")" "${BUILDS[@]%%=*}" <<'PYEOF'
import json, statistics, sys
work, runs, depth, ready, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4]), sys.argv[5:]
def cpu(path):
    wall, user, sys_ = map(float, open(path).read().split()[-3:])
    return user + sys_
def capacity(name, mode, run):
    base = f"{work}/{name}-{mode}-{run}"
    used = cpu(base + ".time") - cpu(f"{work}/{name}-start-{run}.time")
    deep = 0
    for line in open(base + ".txt"):
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if stack.count("bench_deep") >= depth // 2:
            deep += int(n)
    return deep, used, deep / used if used > 0 else float("inf")
print(f"bench/throughput.sh: Ruby {ready.get('version')}, a {depth}-frame spinning stack, 1000 Hz, {runs} runs a build, builds taking turns")
print("CPU s: rbscope's user+system time for the recording less that of one `stack --nonblocking` (its start)")
print(f"{'build':<10}{'mode':<13}{'samples':>9}{'CPU s':>8}{'samples/CPU-s (median)':>24}")
med = {}
for mode in ("nonblocking", "paused"):
    for name in names:
        rows = [capacity(name, mode, r) for r in range(1, runs + 1)]
        med[name, mode] = statistics.median(r[2] for r in rows)
        print(f"{name:<10}{mode:<13}{statistics.median(r[0] for r in rows):>9.0f}{statistics.median(r[1] for r in rows):>8.2f}{med[name, mode]:>24.0f}")
for mode in ("nonblocking", "paused"):
    if ("baseline", mode) in med:
        print(f"now/baseline, {mode}: {med['now', mode] / med['baseline', mode]:.2f}x the samples per CPU-second")
got = med["now", "nonblocking"]
print(f"target, --nonblocking: 20000 samples per CPU-second: {got:.0f}: {'MET' if got >= 20000 else 'MISSED'}")
PYEOF
