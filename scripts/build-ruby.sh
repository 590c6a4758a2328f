#!/usr/bin/env bash
# build-ruby.sh VERSION [--static]
#
# Builds a Ruby with debug info (DWARF) from Debian's source package into
# $RBSCOPE_RUBIES/<name>/ (default /var/cache/rbscope/rubies), skipping the
# work when that build is already there. Prints the prefix on success.
#
#   VERSION   a Ruby minor version whose Debian source package is reachable
#             (3.1 from bookworm).
#   --static  build with --disable-shared (a static ruby executable).
set -euo pipefail

version=${1:?usage: build-ruby.sh VERSION [--static]}
kind=shared
[ "${2:-}" = "--static" ] && kind=static

rubies=${RBSCOPE_RUBIES:-/var/cache/rbscope/rubies}
srcdir=${RBSCOPE_RUBY_SRC:-/var/cache/rbscope/src}
name="ruby-$version-$kind"
prefix="$rubies/$name"

if [ -x "$prefix/bin/ruby" ] && [ -f "$prefix/.rbscope-complete" ]; then
  echo "$prefix"
  exit 0
fi

case "$version" in
  3.1) pkg=ruby3.1 suite=bookworm ;;
  *) echo "build-ruby.sh: no Debian source package known for Ruby $version (known: 3.1)" >&2; exit 1 ;;
esac

ensure_deb_src() {
  local list=/etc/apt/sources.list.d/rbscope-src.sources
  if ! apt-cache showsrc "$pkg" 2>/dev/null | grep -q '^Package:'; then
    cat >"$list" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    apt-get update -qq >&2
  fi
}

mkdir -p "$srcdir" "$rubies"
orig=$(ls "$srcdir"/${pkg}_${version}*.orig.tar.* 2>/dev/null | head -1 || true)
if [ -z "$orig" ]; then
  ensure_deb_src
  command -v dpkg-source >/dev/null || apt-get install -y -qq dpkg-dev >&2
  # Take the oldest version that the archive still serves in full.
  for v in $(apt-cache showsrc "$pkg" | awk '/^Version:/{print $2}' | sort -uV); do
    (cd "$srcdir" && apt-get source --download-only "$pkg=$v" >&2) && break || true
  done
  orig=$(ls "$srcdir"/${pkg}_${version}*.orig.tar.* 2>/dev/null | head -1 || true)
  [ -n "$orig" ] || { echo "build-ruby.sh: could not download the $pkg source package" >&2; exit 1; }
fi

# Build dependencies of a plain Ruby build.
need=()
for p in gcc make autoconf bison libssl-dev libyaml-dev libffi-dev zlib1g-dev libgdbm-dev libreadline-dev; do
  dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  apt-get install -y -qq "${need[@]}" >&2
fi

work=$(mktemp -d "$srcdir/build-$name.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xf "$orig"
cd "$work"/ruby*
# make install would fetch bundled gems from the network: keep only comments.
if [ -f gems/bundled_gems ]; then
  grep '^#' gems/bundled_gems >gems/bundled_gems.tmp || true
  mv gems/bundled_gems.tmp gems/bundled_gems
fi
shared_flag=--enable-shared
[ "$kind" = static ] && shared_flag=--disable-shared
rm -rf "$prefix"
./configure --prefix="$prefix" "$shared_flag" --disable-install-doc \
  optflags="-O2" debugflags="-ggdb3" >"$work/configure.log" 2>&1 ||
  { tail -20 "$work/configure.log" >&2; exit 1; }
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -30 "$work/make.log" >&2; exit 1; }
make install >"$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; exit 1; }
touch "$prefix/.rbscope-complete"
echo "$prefix"
