#!/usr/bin/env bash
# bench/configs.sh: every command of rbscope against testdata/demo.rb on
# every Ruby of the test matrix, as it is built (glibc's malloc, jemalloc
# linked, musl) and again with Debian's libjemalloc preloaded, printing a
# table: configuration x command, each cell "ok" and how long the command
# took, or the first line of what it said.
#
#   bench/configs.sh
#
# Environment:
#   RBSCOPE_RUBIES=/var/cache/rbscope/rubies  the builds (make rubies)
#   RBSCOPE_RUBY_FILTER=REGEX                 only the configurations it matches
#   JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
#
# It is a survey, not a test: the tests check what each command reads
# against what the program knows. Exit status 1 when a cell failed.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
rubies=${RBSCOPE_RUBIES:-/var/cache/rbscope/rubies}
jemalloc=${JEMALLOC:-/usr/lib/x86_64-linux-gnu/libjemalloc.so.2}
filter=${RBSCOPE_RUBY_FILTER:-.}
go build -o bin/rbscope ./cmd/rbscope || exit 1
tmp=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT

configs=()
[ -x /usr/bin/ruby ] && configs+=("debian|/usr/bin/ruby|")
for b in "$rubies"/*/bin/ruby; do
  [ -f "$(dirname "$(dirname "$b")")/.rbscope-complete" ] || continue
  configs+=("$(basename "$(dirname "$(dirname "$b")")")|$b|")
done
n=${#configs[@]}
if [ -e "$jemalloc" ]; then
  for ((i = 0; i < n; i++)); do
    IFS='|' read -r name bin _ <<<"${configs[$i]}"
    case $name in *jemalloc* | *musl*) continue ;; esac
    configs+=("$name+LD_PRELOAD=jemalloc|$bin|LD_PRELOAD=$jemalloc")
  done
fi

commands=("stack" "stack --native" "threads" "heap census" "heap dump" "record" "exec" "alloc")
# run CMD PID: the cell of one command.
run() {
  local cmd=$1 pid=$2 out=$tmp/out start end rc
  start=$(date +%s%N)
  case $cmd in
    "heap dump") bin/rbscope heap dump -p "$pid" -o "$tmp/dump.json" >"$out" 2>&1 ;;
    record) bin/rbscope record -p "$pid" --duration 1 -f collapsed -o "$tmp/rec.txt" >"$out" 2>&1 ;;
    exec) bin/rbscope exec -p "$pid" 'RUBY_VERSION' >"$out" 2>&1 ;;
    alloc) bin/rbscope alloc -p "$pid" --duration 1 >"$out" 2>&1 ;;
    *) bin/rbscope $cmd -p "$pid" >"$out" 2>&1 ;;
  esac
  rc=$?
  end=$(date +%s%N)
  if [ $rc -eq 0 ]; then
    printf 'ok %dms' $(((end - start) / 1000000))
  elif grep -q 'before 3.0' "$out"; then
    printf 'refused on 2.7 (see docs/rubies.md)'
  else
    printf 'FAIL: %s' "$(grep -m1 . "$out" | cut -c1-80)"
    return 1
  fi
}

status=0
printf '| configuration | %s |\n' "$(IFS='|'; echo "${commands[*]}" | sed 's/|/ | /g')"
printf '|---|%s\n' "$(printf -- '---|%.0s' "${commands[@]}")"
for c in "${configs[@]}"; do
  IFS='|' read -r name bin envs <<<"$c"
  [[ $name =~ $filter ]] || continue
  env $envs DEMO_SECONDS=120 "$bin" testdata/demo.rb >"$tmp/demo.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do grep -q "running as pid" "$tmp/demo.log" 2>/dev/null && break; sleep 0.1; done
  row="| $name"
  for cmd in "${commands[@]}"; do
    cell=$(run "$cmd" "$pid") || status=1
    row+=" | $cell"
  done
  echo "$row |"
  kill $pid 2>/dev/null
  wait $pid 2>/dev/null
done
exit $status
