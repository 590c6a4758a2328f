#!/bin/bash
# Times rbscope's heap analyses on dumps of millions of objects: a Ruby
# program (testdata/heap_graph_diff.rb) builds N objects (default five
# million), writes ObjectSpace.dump_all before and after allocating 5,000
# Leaky objects, and this script runs `rbscope heap top`, `heap path` (to
# the last Leaky object) and `heap diff` on those dumps, printing for each
# the wall time against the one-minute target and the peak resident memory
# against the dump's size (target: 2x at most).
#
#   bench/heap_scale.sh            # N=5000000
#   N=1000000 bench/heap_scale.sh
#
# Needs /usr/bin/time (Debian's time package) and a Ruby (RUBY, default
# /usr/bin/ruby); the dumps (about 1 GB each at five million objects) go
# to a temporary directory that is removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-5000000}
RUBY=${RUBY:-/usr/bin/ruby}
[ -x /usr/bin/time ] || { echo "heap_scale.sh: /usr/bin/time is missing: apt-get install time" >&2; exit 1; }
[ -x "$RUBY" ] || { echo "heap_scale.sh: no Ruby at $RUBY: apt-get install ruby, or set RUBY" >&2; exit 1; }
dir=$(mktemp -d /tmp/rbscope-heapscale.XXXXXX)
trap 'rm -rf "$dir"' EXIT
go build -o "$dir/rbscope" ./cmd/rbscope
echo "building $N objects and dumping them twice with ObjectSpace.dump_all ($RUBY)..."
start=$(date +%s.%N)
"$RUBY" testdata/heap_graph_diff.rb "$dir/report.json" "$dir/a.json" "$dir/b.json" "$N"
echo "  took $(echo "$(date +%s.%N) - $start" | bc) s"
leaky=$(sed -n 's/.*"last_leaky":"\([^"]*\)".*/\1/p' "$dir/report.json")
size=$(stat -c %s "$dir/b.json")
objects=$(($(wc -l < "$dir/b.json")))
printf 'dump: %d lines, %.0f MB (the second dump)\n\n' "$objects" "$(echo "$size / 1000000" | bc -l)"
printf '%-34s %9s %9s %11s %13s\n' command wall-s /60s peak-MB peak/dump
run() {
  local name=$1; shift
  /usr/bin/time -f '%e %M' -o "$dir/time" "$dir/rbscope" "$@" > "$dir/out" 2> "$dir/err" || {
    echo "$name failed:" >&2; cat "$dir/err" >&2; exit 1; }
  read -r wall kb < "$dir/time"
  printf '%-34s %9.1f %9.2f %11.0f %13.2f\n' "$name" "$wall" "$(echo "$wall / 60" | bc -l)" \
    "$(echo "$kb * 1024 / 1000000" | bc -l)" "$(echo "$kb * 1024 / $size" | bc -l)"
}
run "heap top B" heap top "$dir/b.json"
run "heap path B last-Leaky" heap path "$dir/b.json" "$leaky"
run "heap diff A B (both loaded)" heap diff "$dir/a.json" "$dir/b.json"
grep -q Leaky "$dir/out" || { echo "heap diff did not find the Leaky objects" >&2; exit 1; }
