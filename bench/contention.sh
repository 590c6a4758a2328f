#!/usr/bin/env bash
# bench/contention.sh: how far `rbscope record`'s shares are from the truth
# when other processes compete for the CPU. testdata/split.rb (50/30/20 % of
# its CPU in chain_a/b/c, measured by its own thread CPU clocks) runs beside
# 0, 1 and 2 CPU spinners (sh -c 'while :; do :; done'), recorded at 100,
# 400 and 1000 Hz, paused and --nonblocking, BENCH_RUNS times each; the
# table gives each chain's error (its share of the samples minus its share
# of the program's CPU over the same window), the mean over the runs and
# the worst run. Goal: every chain within 3 points.
#
#   bench/contention.sh
#
# Environment:
#   BENCH_RUNS=3                 recordings per cell
#   BENCH_SPINNERS=0,1,2         numbers of spinners
#   BENCH_RATES=100,400,1000     rates (Hz)
#   BENCH_MODES=paused,nonblocking
#   BENCH_RUBIES=/var/cache/rbscope/rubies/ruby-3.1-shared/bin/ruby:/usr/bin/ruby
#   BENCH_SHARED=1               the target shares a CPU with one more, pinned spinner
#   RBSCOPE=path to use a given rbscope binary (default: build the tree)
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d /tmp/rbscope-bench-contention.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
BIN=${RBSCOPE:-}
if [[ -z $BIN ]]; then
  GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
  "$GO" build -o "$WORK/rbscope" ./cmd/rbscope
  BIN=$WORK/rbscope
fi
python3 bench/contention.py "$BIN"
