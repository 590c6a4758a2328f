#!/bin/bash
# Times `rbscope ui` on heap dumps of millions of objects against issue
# #26's targets: a Ruby program (testdata/heap_graph_diff.rb) builds N
# objects (default five million), writes ObjectSpace.dump_all before and
# after allocating 5,000 Leaky objects, and this script opens both dumps
# in `rbscope ui`, then prints:
#   - the first open: the time until both dumps are indexed (target: 30 s
#     a dump), and the server's peak memory against the larger dump's size
#     (target: 1.5x);
#   - the first answers asked as soon as both dumps are indexed, while
#     what the server prepares in the background is under way (target:
#     300 ms): the later dump's waste, then the diff and the leak suspects
#     of the two dumps given in reverse order (the earlier against the
#     later), which nothing prepared for that order;
#   - each view's answer time at the server, the first and the larger of
#     the next two (target: 300 ms): overview by class and type, a group's objects, an
#     object page, paths to the last Leaky object, top retainers, waste,
#     the diff and the leak suspects of the two dumps;
#   - a second open, from the index files: from the launch until the
#     first dump's overview answers (target: 2 s), the server's memory
#     then and once both dumps are open (resident: the index files' pages
#     it maps, which are the page cache's, and its own memory), and a
#     comparison asked as soon as both are open (the leak suspects of the
#     two dumps in reverse order, kept by the first open's server under
#     the cache directory).
#
#   bench/ui_scale.sh            # N=5000000
#   N=1000000 bench/ui_scale.sh
#
# Needs curl and a Ruby (RUBY, default /usr/bin/ruby); the dumps (about
# 1 GB each at five million objects) go to a temporary directory that is
# removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-5000000}
RUBY=${RUBY:-/usr/bin/ruby}
command -v curl >/dev/null || { echo "ui_scale.sh: curl is missing: apt-get install curl" >&2; exit 1; }
[ -x "$RUBY" ] || { echo "ui_scale.sh: no Ruby at $RUBY: apt-get install ruby, or set RUBY" >&2; exit 1; }
dir=$(mktemp -d /tmp/rbscope-uiscale.XXXXXX)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$dir"' EXIT
go build -o "$dir/rbscope" ./cmd/rbscope
echo "building $N objects and dumping them twice with ObjectSpace.dump_all ($RUBY)..."
"$RUBY" testdata/heap_graph_diff.rb "$dir/report.json" "$dir/a.json" "$dir/b.json" "$N"
leaky=$(sed -n 's/.*"last_leaky":"\([^"]*\)".*/\1/p' "$dir/report.json")
size=$(stat -c %s "$dir/b.json")
printf 'dumps: %d and %d objects, %.0f MB and %.0f MB\n\n' "$(wc -l < "$dir/a.json")" "$(wc -l < "$dir/b.json")" \
  "$(echo "$(stat -c %s "$dir/a.json") / 1000000" | bc -l)" "$(echo "$size / 1000000" | bc -l)"

# start opens both dumps in a new server and waits until both are indexed;
# it sets server, base, token and elapsed (the seconds that took).
start() {
  local t0 t1
  t0=$(date +%s.%N)
  rm -f "$dir/url"
  "$dir/rbscope" ui --cache-dir "$dir/cache" "$dir/a.json" "$dir/b.json" > "$dir/url" 2> "$dir/ui.err" &
  server=$!
  while ! grep -q token "$dir/url" 2>/dev/null; do sleep 0.05; done
  url=$(head -1 "$dir/url")
  base=${url%%/?token=*}
  token=${url##*token=}
  until curl -sf "$base/api/files?token=$token" | grep -q '"state":"ready".*"state":"ready"'; do
    if curl -sf "$base/api/files?token=$token" | grep -q '"state":"error"'; then
      echo "a dump failed to open:" >&2; cat "$dir/ui.err" >&2; exit 1
    fi
    sleep 0.1
  done
  t1=$(date +%s.%N)
  elapsed=$(echo "$t1 - $t0" | bc -l)
}

# view NAME PATH: the first answer time of GET PATH at the server (a diff
# or the suspects are computed then, and kept) and the larger of the next
# two.
view() {
  local name=$1 path=$2 times=()
  for _ in 1 2 3; do
    times+=("$(curl -s -o "$dir/answer" -w '%{time_total}' "$base$path&token=$token")")
    grep -q '"error"' "$dir/answer" && { echo "$name: $(cat "$dir/answer")" >&2; exit 1; }
  done
  local again
  again=$(printf '%s\n' "${times[1]}" "${times[2]}" | sort -n | tail -1)
  printf '%-36s %9.0f %9.2f %9.0f %9.2f\n' "$name" "$(echo "${times[0]} * 1000" | bc -l)" "$(echo "${times[0]} / 0.3" | bc -l)" \
    "$(echo "$again * 1000" | bc -l)" "$(echo "$again / 0.3" | bc -l)"
}

start
first=$elapsed
hwm=$(awk '/VmHWM/ {print $2}' "/proc/$server/status")
printf '%-36s %9.1f s %6.2f of 2x30 s\n' "first open, both dumps indexed" "$first" "$(echo "$first / 60" | bc -l)"
printf '%-36s %9.0f MB %6.2f x the larger dump (target 1.5)\n\n' "server peak memory" "$(echo "$hwm * 1024 / 1000000" | bc -l)" "$(echo "$hwm * 1024 / $size" | bc -l)"
printf '%-36s %9s %9s %9s %9s\n' view first-ms /300ms again-ms /300ms
view "waste, asked as both are indexed" "/api/heap/waste?f=1"
view "diff, reverse order" "/api/heap/diff?f=0&before=1"
view "leak suspects, reverse order" "/api/heap/suspects?f=0&before=1"
view "overview by class" "/api/heap/overview?f=1&by=class"
view "overview by type" "/api/heap/overview?f=1&by=type"
view "overview sorted by count" "/api/heap/overview?f=1&by=class&sort=count"
view "objects of the largest group" "/api/heap/objects?f=1&by=class&group=0"
view "object page of the last Leaky" "/api/heap/object?f=1&addr=$leaky"
view "paths to the last Leaky" "/api/heap/paths?f=1&addr=$leaky"
view "top retainers" "/api/heap/top?f=1&n=50"
view "waste" "/api/heap/waste?f=1"
view "diff of the two dumps" "/api/heap/diff?f=1&before=0"
view "leak suspects of the two dumps" "/api/heap/suspects?f=1&before=0"
kill "$server"; wait "$server" 2>/dev/null || true
# The second open: from the launch until the first dump's overview
# answers (the request waits for that dump to load from its index).
t0=$(date +%s.%N)
rm -f "$dir/url"
"$dir/rbscope" ui --cache-dir "$dir/cache" "$dir/a.json" "$dir/b.json" > "$dir/url" 2> "$dir/ui.err" &
server=$!
while ! grep -q token "$dir/url" 2>/dev/null; do sleep 0.01; done
url=$(head -1 "$dir/url"); base=${url%%/?token=*}; token=${url##*token=}
curl -sf -o /dev/null "$base/api/heap/overview?f=0&by=class&token=$token"
again=$(echo "$(date +%s.%N) - $t0" | bc -l)
printf '\n%-36s %9.1f s %6.2f of 2 s (launch to the first dump'"'"'s overview, from its index)\n' "second open" "$again" "$(echo "$again / 2" | bc -l)"
# rss prints the server's resident memory: all of it, the index files'
# pages and its own.
rss() {
  awk -v size="$size" '/^VmRSS/ {r=$2} /^RssFile/ {f=$2} /^RssAnon/ {a=$2}
    END {printf "%.0f MB, %.2f x the larger dump (index files mapped %.0f MB, own %.0f MB)", r*1024/1e6, r*1024/size, f*1024/1e6, a*1024/1e6}' "/proc/$server/status"
}
printf '%-36s %s\n' "  server memory then" "$(rss)"
until curl -sf "$base/api/files?token=$token" | grep -q '"state":"ready".*"state":"ready"'; do sleep 0.01; done
view "leak suspects reverse, both open" "/api/heap/suspects?f=0&before=1"
printf '%-36s %s\n' "  server memory then" "$(rss)"
