#!/usr/bin/env bash
# debian-ruby-sysroot.sh unpacks Debian's binary Ruby 3.4.11 (experimental's
# ruby3.4 and libruby3.4 3.4.11-1~exp1, stripped as Debian ships them)
# with the C library and libraries it runs on (sid's: it needs glibc 2.38
# or later) into $RBSCOPE_RUBIES/ruby-3.4.11-debian (default
# /var/cache/rbscope/rubies), where the test matrix runs it as users get
# it from Debian. Debian serves no source of this release, so it is not
# built: the binary is used as it is, and rbscope reads it with its
# built-in 3.4 table.
#
#   ruby-3.4.11-debian/sysroot/   the packages, unpacked (dpkg -x)
#   ruby-3.4.11-debian/bin/ruby   runs sysroot/usr/bin/ruby3.4 through the
#                                 sysroot's dynamic linker, its libraries
#                                 on --library-path and its standard
#                                 library on -I:
#
#     SYSROOT/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 \
#       --library-path SYSROOT/usr/lib/x86_64-linux-gnu SYSROOT/usr/bin/ruby3.4 \
#       -I SYSROOT/usr/lib/ruby/3.4.0 -I SYSROOT/usr/lib/x86_64-linux-gnu/ruby/3.4.0 ARGS
#
# The process's executable is then the sysroot's ld.so, and ruby3.4 and
# its libruby are files it maps, as the dynamic linker maps any library.
#
# Nothing is installed and the host's apt configuration is left alone:
# the index of sid and experimental is fetched into an apt state of this
# script's own ($rubies/.debian-apt: its sources list, lists and archive
# cache; the host's apt.conf.d still applies, for its proxy), and apt-get
# download fetches the packages from it. Prints the prefix on success,
# skipping the work when it is already complete (.rbscope-complete).
set -euo pipefail
release=3.4.11
debversion=3.4.11-1~exp1
rubies=${RBSCOPE_RUBIES:-/var/cache/rbscope/rubies}
prefix=$rubies/ruby-$release-debian

mkdir -p "$rubies"
chmod 755 "$rubies"
case "$rubies" in /var/cache/rbscope/*) chmod 755 /var/cache/rbscope ;; esac
exec 9>"$rubies/.ruby-$release-debian.lock"
flock 9
if [ -x "$prefix/bin/ruby" ] && [ -f "$prefix/.rbscope-complete" ]; then
  echo "$prefix"
  exit 0
fi

# The C library, the libraries libruby3.4, ruby3.4 and their extensions
# link (readelf -d: NEEDED), and what those link in turn (libssl3t64's
# libcrypto links zlib and zstd; glibc's pthread_cancel loads libgcc_s).
packages="ruby3.4=$debversion libruby3.4=$debversion libc6 libgcc-s1 libgmp10
  libffi8 libssl3t64 libyaml-0-2 zlib1g libcrypt1 libzstd1"

apt=$rubies/.debian-apt
mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/sources.list.d" "$apt/preferences.d"
cat >"$apt/sources.list" <<SRC
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian experimental main
SRC
: >"$apt/status"
opts=(-o Dir::Etc::SourceList="$apt/sources.list" -o Dir::Etc::SourceParts="$apt/sources.list.d"
  -o Dir::Etc::Preferences="$apt/preferences" -o Dir::Etc::PreferencesParts="$apt/preferences.d"
  -o Dir::State::Lists="$apt/lists" -o Dir::State::status="$apt/status" -o Dir::Cache="$apt/cache"
  -o APT::Architectures::=amd64 -o Acquire::Languages=none
  -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
  -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false)
apt-get "${opts[@]}" update -qq >&2
if ! apt-cache "${opts[@]}" show "ruby3.4=$debversion" >/dev/null 2>&1; then
  echo "debian-ruby-sysroot.sh: experimental's index no longer lists ruby3.4 $debversion" >&2
  exit 1
fi

debs=$(mktemp -d "$rubies/.debs-$release.XXXXXX")
trap 'rm -rf "$debs" "$prefix.tmp"' EXIT
chmod 0755 "$debs" # apt's _apt user writes the downloads
(cd "$debs" && apt-get "${opts[@]}" download -qq $packages) >&2
rm -rf "$prefix.tmp"
mkdir -p "$prefix.tmp/sysroot" "$prefix.tmp/bin"
for deb in "$debs"/*.deb; do
  dpkg -x "$deb" "$prefix.tmp/sysroot"
done
(cd "$debs" && ls *.deb) >"$prefix.tmp/.rbscope-packages"

sysroot=$prefix/sysroot
lib=$sysroot/usr/lib/x86_64-linux-gnu
cat >"$prefix.tmp/bin/ruby" <<WRAPPER
#!/bin/sh
# Debian's ruby3.4 $debversion on sid's C library, both unpacked into
# $sysroot by scripts/debian-ruby-sysroot.sh.
exec '$lib/ld-linux-x86-64.so.2' --library-path '$lib' '$sysroot/usr/bin/ruby3.4' \\
  -I '$sysroot/usr/lib/ruby/3.4.0' -I '$lib/ruby/3.4.0' "\$@"
WRAPPER
chmod 755 "$prefix.tmp/bin/ruby"
rm -rf "$prefix"
mv "$prefix.tmp" "$prefix"
# The Ruby runs, is the release asked for, and loads the extensions the
# tests use (each links one of the unpacked libraries).
got=$("$prefix/bin/ruby" -e 'require "fiddle"; require "openssl"; require "zlib"; require "psych"; require "objspace"; print RUBY_VERSION')
if [ "$got" != "$release" ]; then
  echo "debian-ruby-sysroot.sh: $prefix/bin/ruby says RUBY_VERSION $got, not $release" >&2
  exit 1
fi
touch "$prefix/.rbscope-complete"
echo "$prefix"
