#!/bin/bash
# How long rbscope's heap dump stops a real Rails application, against how
# long the application's own ObjectSpace.dump_all stops it, in the same
# run: Debian's Redmine (scripts/redmine-db.sh's database, 450 issues)
# under Debian's Puma with four threads and ab's load on its issue lists,
# with glibc's malloc and with jemalloc preloaded. For each, ROUNDS
# (default 3) rounds of: dump_all (timed by Redmine's own clock, through
# testdata/apps/redmine.ru's /__rbscope/dump_all), then `rbscope heap dump`
# (its "paused N ms"). Prints each round and the ratio of the medians
# (target: at most 0.1), with the objects written and how many were
# partial (target: 0).
#
#   bench/redmine.sh
#   ROUNDS=5 bench/redmine.sh
#
# Needs make deps (redmine, redmine-sqlite, puma, apache2-utils,
# libjemalloc2) and root.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
command -v puma >/dev/null && command -v ab >/dev/null || { echo "redmine.sh: puma and ab are missing: make deps" >&2; exit 1; }
seeded=$(scripts/redmine-db.sh)
dir=$(mktemp -d /tmp/rbscope-redmine.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 -- "-$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
go build -o "$dir/rbscope" ./cmd/rbscope
here=$(pwd)

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

printf '%-9s %5s %12s %12s %9s %9s\n' malloc round dump_all-ms rbscope-ms objects partial
for kind in glibc jemalloc; do
  run="$dir/$kind"
  mkdir -p "$run"
  cp "$seeded" "$run/redmine.sqlite3"
  port=$((20000 + RANDOM % 20000))
  preload=
  [ "$kind" = jemalloc ] && preload=$JEMALLOC
  (cd /usr/share/redmine && RBSCOPE_REPORT_DIR="$run" DATABASE_URL="sqlite3:$run/redmine.sqlite3" RAILS_ENV=production \
    LD_PRELOAD=$preload setsid puma -e production -t 4:4 -b "tcp://127.0.0.1:$port" "$here/testdata/apps/redmine.ru" \
    > "$run/puma.log" 2>&1) &
  disown
  for _ in $(seq 1 1800); do [ -f "$run/app.json" ] && break; sleep 0.1; done
  pid=$(sed -n 's/.*"pid":\([0-9]*\).*/\1/p' "$run/app.json")
  [ -n "$pid" ] || { echo "redmine.sh: Redmine did not boot:" >&2; cat "$run/puma.log" >&2; exit 1; }
  pids+=("$pid")
  until curl -sf "http://127.0.0.1:$port/projects/proj-0/issues" >/dev/null; do sleep 0.2; done
  setsid ab -q -r -t 3600 -n 100000000 -c 2 "http://127.0.0.1:$port/projects/proj-0/issues?per_page=100" >/dev/null 2>&1 &
  pids+=("$!")
  disown
  sleep 5
  : > "$run/theirs"; : > "$run/mine"
  for r in $(seq 1 "$ROUNDS"); do
    theirs=$(curl -sf "http://127.0.0.1:$port/__rbscope/dump_all?n=$r" | sed -n 's/.*"seconds":\([0-9.e-]*\).*/\1/p')
    rm -f "$run/dumps/dump_all$r.json"
    msg=$("$dir/rbscope" heap dump -p "$pid" -o "$run/mine.json" 2>&1)
    mine=$(echo "$msg" | sed -n 's/.*paused \([0-9]*\) ms.*/\1/p')
    objects=$(echo "$msg" | sed -n 's/.*: \([0-9]*\) objects and.*/\1/p')
    partial=$(grep -c '"partial":' "$run/mine.json" || true)
    theirs_ms=$(echo "$theirs * 1000" | bc -l)
    printf '%-9s %5d %12.0f %12d %9d %9d\n' "$kind" "$r" "$theirs_ms" "$mine" "$objects" "$partial"
    echo "$theirs_ms" >> "$run/theirs"
    echo "$mine" >> "$run/mine"
  done
  t=$(median < "$run/theirs"); m=$(median < "$run/mine")
  printf '%-9s median: rbscope paused %.0f ms, dump_all %.0f ms: %.3fx (target <= 0.1x)\n' "$kind" "$m" "$t" "$(echo "$m / $t" | bc -l)"
  kill -9 -- "-$pid" 2>/dev/null || true
done
