#!/bin/sh
# gcore-workloads.sh: store compressed cores of our own test programs, for
# the test tier that reads cores with nothing but the core and needs no Ruby
# (internal/rubyvm TestCoreStoredWorkloads).
#
# For every Ruby found (/usr/bin/ruby and $RBSCOPE_RUBIES/*/bin/ruby, the
# finished builds of scripts/build-ruby.sh) it starts each workload below,
# waits for the program's own report (the stacks it sees from inside), takes
# a core with gdb's gcore, stops the program and stores
#
#   OUT/RUBY-WORKLOAD.core.zst   the core (zstd; gzip when zstd is missing)
#   OUT/RUBY-WORKLOAD.json       the program's report
#
# When kernel.core_pattern writes a plain file into the process's working
# directory ("core", "core.%p", no pipe, no directory), it also runs each
# workload once more and kills it with SIGABRT, storing the kernel's core
# (which holds only the first page of each mapped file, unlike gcore's) as
# RUBY-WORKLOAD-kernel.core.zst and .json.
#
# OUT is the first argument, default $RBSCOPE_CORES or
# /var/cache/rbscope/cores. Existing cores are kept unless -f is given. The
# cores are large (hundreds of MB before compression): they live in the
# cache, never in the repository.
#
# Usage: scripts/gcore-workloads.sh [-f] [OUT]
set -eu

force=
if [ "${1:-}" = -f ]; then force=1; shift; fi
out=${1:-${RBSCOPE_CORES:-/var/cache/rbscope/cores}}
rubies=${RBSCOPE_RUBIES:-/var/cache/rbscope/rubies}
here=$(cd "$(dirname "$0")/.." && pwd)

command -v gcore >/dev/null || { echo "gcore (gdb) is needed" >&2; exit 1; }
if command -v zstd >/dev/null; then
	compress="zstd -q -T0 -6 -c"; ext=zst
else
	compress="gzip -6 -c"; ext=gz
fi
mkdir -p "$out"
work=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT INT TERM

# Workloads: a testdata program and its arguments after the report path.
# stack_threads.rb puts its threads into known states and reports their
# caller_locations; 100 is the deep thread's depth.
workloads="stack_threads.rb:100"

# Tests that change core_pattern hold this lock (internal/testruby); hold
# it too, so that the pattern read here stays while the kernel cores are
# written.
if command -v flock >/dev/null; then
	exec 9>>/tmp/rbscope-core_pattern.lock
	flock -w 600 9 || true
fi
pattern=$(cat /proc/sys/kernel/core_pattern 2>/dev/null || echo "|")
case $pattern in
"|"* | */*) kernel= ;;
*) kernel=1 ;;
esac

# run RUBY_BIN SCRIPT ARGS...: start the workload in $work and wait for its
# report; $pid is the program. Fails when no report comes within 60 s.
run() {
	bin=$1 script=$2
	shift 2
	rm -f "$work/report.json" "$work"/core*
	(cd "$work" && ulimit -c unlimited && exec "$bin" "$here/testdata/$script" "$work/report.json" "$@") >"$work/out.log" 2>&1 &
	pid=$!
	i=0
	until [ -s "$work/report.json" ]; do
		i=$((i + 1))
		if [ $i -gt 600 ] || ! kill -0 "$pid" 2>/dev/null; then
			cat "$work/out.log" >&2
			kill -9 "$pid" 2>/dev/null || true
			pid=
			return 1
		fi
		sleep 0.1
	done
	sleep 1 # the main thread writes its report just before it sleeps
}

# keep CORE BASE: compress the core and copy the report into $out.
keep() {
	$compress "$1" >"$out/$2.core.$ext.tmp"
	mv "$out/$2.core.$ext.tmp" "$out/$2.core.$ext"
	cp "$work/report.json" "$out/$2.json"
	echo "$2: $(du -h "$out/$2.core.$ext" | cut -f1)"
	rm -f "$1"
}

# stop: kill the workload and reap it.
stop() {
	kill -9 "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	pid=
}

# fresh BASE: whether BASE must be (re)made.
fresh() {
	[ -n "$force" ] || ! [ -s "$out/$1.core.$ext" ] || ! [ -s "$out/$1.json" ]
}

# store RUBY_BIN NAME: the cores of every workload of that Ruby.
store() {
	rb=$1 name=$2
	for w in $workloads; do
		script=${w%%:*}
		base=$name-${script%.rb}
		# shellcheck disable=SC2046 # the arguments are words
		if ! fresh "$base"; then
			echo "$base: kept"
		elif run "$rb" "$script" $(echo "${w#*:}" | tr , ' '); then
			if gcore -o "$work/core" "$pid" >"$work/gcore.log" 2>&1; then
				keep "$work/core.$pid" "$base"
			else
				echo "$base: gcore failed:" >&2
				cat "$work/gcore.log" >&2
			fi
			stop
		else
			echo "$base: no report within 60 s" >&2
		fi
		[ -n "$kernel" ] || continue
		base=$base-kernel
		# shellcheck disable=SC2046
		if ! fresh "$base"; then
			echo "$base: kept"
		elif run "$rb" "$script" $(echo "${w#*:}" | tr , ' '); then
			kill -ABRT "$pid"
			wait "$pid" 2>/dev/null || true
			pid=
			set -- "$work"/core*
			if [ -s "$1" ]; then
				keep "$1" "$base"
			else
				echo "$base: the kernel wrote no core (core_pattern $pattern)" >&2
			fi
		else
			echo "$base: no report within 60 s" >&2
		fi
	done
}

if [ -x /usr/bin/ruby ]; then
	store /usr/bin/ruby "debian-$(/usr/bin/ruby -e 'print RUBY_VERSION')"
fi
for bin in "$rubies"/*/bin/ruby; do
	[ -x "$bin" ] || continue
	dir=$(dirname "$(dirname "$bin")")
	[ -e "$dir/.rbscope-complete" ] || continue # still building
	store "$bin" "$(basename "$dir")"
done
