#!/usr/bin/env bash
# bench/stack.sh: how long a whole `rbscope stack -p PID` takes, wall clock
# from process start to exit, on a Ruby process whose main thread is
# BENCH_DEPTH (200) frames deep with three more threads beside it; and the
# same for `rbscope stack --nonblocking`, for `rbscope stack --native`
# (every thread's native frames too, as gdb shows them) and for gdb's
# `thread apply all bt`, the usual way to get stacks out of a live process.
# It prints the medians, the ratio of gdb's to rbscope's, and the largest
# peak RSS of five runs of each rbscope command (GNU time's %M).
#
#   bench/stack.sh            (or: make bench)
#
# Environment:
#   BENCH_N=50        timed runs of rbscope stack (and of --nonblocking)
#   BENCH_M=5         timed runs of gdb (0 skips gdb)
#   BENCH_DEPTH=200   frames of bench_deep on the main thread
#   BENCH_MODE=sleep  what the main thread does at the bottom: sleep or spin
#   BENCH_TARGET_MS=20  the target for rbscope's median
#   BENCH_NATIVE_TARGET_MS=30  the target for rbscope stack --native's median
#   RUBY=/usr/bin/ruby, GDB=gdb, GO=go (Go is also looked for in /usr/local/go/bin)
#   RBSCOPE_BIN=bin/rbscope   the binary measured (built when it is bin/rbscope and missing)
#
# Every timed rbscope run must exit 0 and print exactly BENCH_DEPTH
# bench_deep frames, so the benchmark cannot time an error. Exit status: 0
# when everything ran and the median met the target, 1 on any failure, 3
# when everything ran but rbscope's median missed the target.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

N=${BENCH_N:-50}
M=${BENCH_M:-5}
DEPTH=${BENCH_DEPTH:-200}
MODE=${BENCH_MODE:-sleep}
TARGET_MS=${BENCH_TARGET_MS:-20}
NATIVE_TARGET_MS=${BENCH_NATIVE_TARGET_MS:-30}
RUBY=${RUBY:-/usr/bin/ruby}
GDB=${GDB:-gdb}
BIN=${RBSCOPE_BIN:-$ROOT/bin/rbscope}

die() { echo "bench/stack.sh: $*" >&2; exit 1; }

for v in N M DEPTH TARGET_MS NATIVE_TARGET_MS; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v must be a whole number, got '${!v}'"
done
(( N >= 1 )) || die "BENCH_N must be >= 1"
(( DEPTH >= 1 )) || die "BENCH_DEPTH must be >= 1"
[[ -x $RUBY ]] || RUBY=$(command -v ruby) || die "no Ruby: install Debian's ruby (apt-get install ruby) or set RUBY"
if (( M > 0 )); then
  command -v "$GDB" >/dev/null || die "no gdb: apt-get install gdb, or BENCH_M=0 to skip it"
fi

# Build rbscope if it is missing.
if [[ ! -x $BIN ]]; then
  GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
  [[ -x $GO ]] || die "bin/rbscope is missing and there is no Go to build it"
  echo "building bin/rbscope" >&2
  "$GO" build -o "$BIN" ./cmd/rbscope || die "go build failed"
fi

WORK=$(mktemp -d)
RUBY_PID=
cleanup() {
  if [[ -n $RUBY_PID ]]; then
    kill -KILL "$RUBY_PID" 2>/dev/null || true
    wait "$RUBY_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# now_us prints the time in microseconds without forking where bash can
# (EPOCHREALTIME, bash >= 5), else from date(1).
if [[ -n ${EPOCHREALTIME:-} ]]; then
  now_us_into() { local t=${EPOCHREALTIME/[.,]/}; printf -v "$1" '%s' "$((10#$t))"; }
else
  now_us_into() { printf -v "$1" '%s' "$(( $(date +%s%N) / 1000 ))"; }
fi

# Start the workload and wait for its ready file.
READY=$WORK/ready.json
"$RUBY" "$ROOT/testdata/bench_deep.rb" "$READY" "$DEPTH" "$MODE" >"$WORK/ruby.log" 2>&1 &
RUBY_PID=$!
for _ in $(seq 300); do
  [[ -s $READY ]] && break
  kill -0 "$RUBY_PID" 2>/dev/null || die "the Ruby workload exited: $(cat "$WORK/ruby.log")"
  sleep 0.05
done
[[ -s $READY ]] || die "the Ruby workload was not ready within 15 s: $(cat "$WORK/ruby.log")"
grep -q "\"pid\":$RUBY_PID," "$READY" || die "ready file names another process: $(cat "$READY")"
RUBY_VERSION=$("$RUBY" -e 'print RUBY_VERSION')

# check_rbscope FILE: FILE must hold a dump with the four threads and
# exactly DEPTH bench_deep frames.
check_rbscope() {
  local got threads
  got=$(awk '$1 ~ /(^|[#.])bench_deep$/ { n++ } END { print n + 0 }' "$1")
  threads=$(grep -c '^Thread ' "$1" || true)
  if [[ $got != "$DEPTH" || $threads != 4 ]]; then
    echo "bench/stack.sh: rbscope printed $got bench_deep frames (want $DEPTH) in $threads threads (want 4):" >&2
    head -20 "$1" >&2
    return 1
  fi
}

# time_runs NAME COUNT CHECK CMD...: runs CMD COUNT times, stdout to a file
# checked by CHECK after each run, and appends the wall times (us) to
# $WORK/NAME.times.
time_runs() {
  local name=$1 count=$2 check=$3 t0 t1 rc i
  shift 3
  : >"$WORK/$name.times"
  for ((i = 0; i < count; i++)); do
    now_us_into t0
    rc=0
    "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" </dev/null || rc=$?
    now_us_into t1
    if (( rc != 0 )); then
      echo "bench/stack.sh: run $((i + 1)) of $name exited $rc:" >&2
      cat "$WORK/$name.err" >&2
      return 1
    fi
    "$check" "$WORK/$name.out" || return 1
    echo $((t1 - t0)) >>"$WORK/$name.times"
  done
}

# pct FILE P prints the P-th percentile (nearest rank; 50 = median) of the
# microsecond times in FILE, in ms.
pct() {
  sort -n "$1" | awk -v p="$2" '{ v[NR] = $1 }
    END { r = int((p * NR + 99) / 100); if (r < 1) r = 1; printf "%.2f", v[r] / 1000 }'
}

# check_native FILE: as check_rbscope, for stack --native, which lists
# the native threads that run no Ruby too.
check_native() {
  local got threads
  got=$(awk '$1 ~ /(^|[#.])bench_deep$/ { n++ } END { print n + 0 }' "$1")
  threads=$(grep -c '^Thread ' "$1" || true)
  if [[ $got != "$DEPTH" || $threads -lt 4 ]] || ! grep -q 'rb_vm_exec\|vm_exec' "$1"; then
    echo "bench/stack.sh: rbscope --native printed $got bench_deep frames (want $DEPTH) in $threads threads (want >= 4), or no exec-loop frame:" >&2
    head -20 "$1" >&2
    return 1
  fi
}

check_gdb() {
  # gdb prints one "Thread N (...)" header per thread; the Ruby process has
  # at least the four Ruby threads (plus Ruby's timer thread).
  local n
  n=$(grep -c '^Thread [0-9]' "$1" || true)
  if (( n < 4 )); then
    echo "bench/stack.sh: gdb printed $n threads (want >= 4):" >&2
    head -20 "$1" >&2
    return 1
  fi
}

echo "workload: Ruby $RUBY_VERSION pid $RUBY_PID, main thread $DEPTH frames deep ($MODE), 4 Ruby threads"

# One untimed run of each, to warm the page cache and check the setup.
"$BIN" stack -p "$RUBY_PID" >"$WORK/warm.out" || die "rbscope stack -p $RUBY_PID failed"
check_rbscope "$WORK/warm.out" || exit 1

time_runs rbscope "$N" check_rbscope "$BIN" stack -p "$RUBY_PID" || exit 1
time_runs nonblocking "$N" check_rbscope "$BIN" stack --nonblocking -p "$RUBY_PID" || exit 1
time_runs native "$N" check_native "$BIN" stack --native -p "$RUBY_PID" || exit 1
native_frames=$(grep -c '\[.*\] [0-9]* B' "$WORK/native.out" || true)
if (( M > 0 )); then
  time_runs gdb "$M" check_gdb "$GDB" -p "$RUBY_PID" -batch -ex 'thread apply all bt' || exit 1
fi
# max_rss_mib CMD...: the largest peak RSS (MiB) of 5 runs of CMD, from
# GNU time when there is one, else nothing.
max_rss_mib() {
  [[ -x /usr/bin/time ]] || return 0
  local i kb max=0
  for ((i = 0; i < 5; i++)); do
    kb=$(/usr/bin/time -f '%M' "$@" 2>&1 >/dev/null </dev/null | tail -1)
    [[ $kb =~ ^[0-9]+$ ]] && (( kb > max )) && max=$kb
  done
  awk -v k="$max" 'BEGIN { printf "%.1f", k / 1024 }'
}
rb_rss=$(max_rss_mib "$BIN" stack -p "$RUBY_PID")
na_rss=$(max_rss_mib "$BIN" stack --native -p "$RUBY_PID")

# The target must still be running, and every thread must be resumed:
# rbscope reads it once more afterwards.
kill -0 "$RUBY_PID" 2>/dev/null || die "the Ruby workload died during the benchmark"
"$BIN" stack -p "$RUBY_PID" >"$WORK/after.out" || die "rbscope stack failed after the benchmark"
check_rbscope "$WORK/after.out" || exit 1
state=$(awk '{ print $3 }' "/proc/$RUBY_PID/stat")
[[ $state != t && $state != T ]] || die "the Ruby workload was left stopped (state $state)"

rb_med=$(pct "$WORK/rbscope.times" 50)
rb_p90=$(pct "$WORK/rbscope.times" 90)
nb_med=$(pct "$WORK/nonblocking.times" 50)
nb_p90=$(pct "$WORK/nonblocking.times" 90)
printf 'rbscope stack               (N=%d): median %s ms, p90 %s ms, max RSS %s MiB\n' "$N" "$rb_med" "$rb_p90" "${rb_rss:-?}"
printf 'rbscope stack --nonblocking (N=%d): median %s ms, p90 %s ms\n' "$N" "$nb_med" "$nb_p90"
na_med=$(pct "$WORK/native.times" 50)
na_p90=$(pct "$WORK/native.times" 90)
printf 'rbscope stack --native      (N=%d): median %s ms, p90 %s ms, max RSS %s MiB (%s native frames)\n' "$N" "$na_med" "$na_p90" "${na_rss:-?}" "$native_frames"
if (( M > 0 )); then
  gdb_med=$(pct "$WORK/gdb.times" 50)
  printf 'gdb thread apply all bt     (M=%d): median %s ms\n' "$M" "$gdb_med"
  printf 'ratio gdb/rbscope (medians): %sx\n' "$(awk -v g="$gdb_med" -v r="$rb_med" 'BEGIN { printf "%.1f", g / r }')"
  printf 'ratio gdb/rbscope --native (medians): %sx\n' "$(awk -v g="$gdb_med" -v r="$na_med" 'BEGIN { printf "%.1f", g / r }')"
fi
missed=0
if awk -v m="$rb_med" -v t="$TARGET_MS" 'BEGIN { exit !(m < t) }'; then
  echo "target: rbscope median < $TARGET_MS ms: MET"
else
  echo "target: rbscope median < $TARGET_MS ms: MISSED"
  missed=1
fi
if awk -v m="$na_med" -v t="$NATIVE_TARGET_MS" 'BEGIN { exit !(m < t) }'; then
  echo "target: rbscope --native median < $NATIVE_TARGET_MS ms: MET"
else
  echo "target: rbscope --native median < $NATIVE_TARGET_MS ms: MISSED"
  missed=1
fi
(( missed == 0 )) || exit 3
