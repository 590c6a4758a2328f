#!/usr/bin/env bash
# build-ruby.sh VERSION [--static | --stripped | --musl] [--jemalloc]
#
# Builds a Ruby with debug info (DWARF) from Debian's source package into
# $RBSCOPE_RUBIES/<name>/ (default /var/cache/rbscope/rubies), skipping the
# work when that build is already there. Prints the prefix on success.
#
#   VERSION     a Ruby minor version whose Debian source package is known:
#               2.7 (bullseye's ruby2.7), 3.1 (bookworm's ruby3.1),
#               3.3 (trixie's ruby3.3) or 3.4 (experimental's ruby3.4),
#               built from the oldest release the suite serves; or one
#               release of such a family that the suite serves beside it
#               (3.4.11: experimental has 3.4.5 and 3.4.11), built into
#               ruby-3.4.11-KIND. Only the upstream .orig tarball is used,
#               built with Ruby's own ./configure.
#   (none)      ruby-VERSION-shared: --enable-shared, DWARF in libruby.
#   --static    ruby-VERSION-static: --disable-shared, the VM and its DWARF
#               in the ruby executable.
#   --stripped  ruby-VERSION-stripped: a copy of ruby-VERSION-shared (built
#               first if missing) whose libruby and ruby have neither
#               .debug_* nor .symtab, like a distribution's Ruby; rbscope
#               reads it with its built-in layout table. Its ruby runs its
#               own libruby ($ORIGIN RUNPATH) but loads the standard library
#               from the shared build, whose prefix libruby has built in.
#   --musl      ruby-VERSION-musl: like the shared build, with musl-gcc
#               against musl's C library (as Alpine's Rubies run), 3.3+.
#               The extensions that need another library are left out
#               (openssl, psych, zlib, readline, gdbm: Debian has them for
#               glibc only), but Fiddle, which the tests use, links a
#               libffi built here with musl-gcc; no YJIT (Rust's standard
#               library would be glibc's).
#   --jemalloc  ruby-VERSION-KIND-jemalloc: configured --with-jemalloc, so
#               that Ruby's malloc is jemalloc (Debian's libjemalloc2), as
#               in builds made for production; not with --stripped.
set -euo pipefail

usage="usage: build-ruby.sh VERSION [--static | --stripped | --musl] [--jemalloc]"
version=${1:?$usage}
shift
kind=shared
jemalloc=
for opt in "$@"; do
  case "$opt" in
    --static) kind=static ;;
    --stripped) kind=stripped ;;
    --musl) kind=musl ;;
    --jemalloc) jemalloc=-jemalloc ;;
    *) echo "build-ruby.sh: unknown option $opt ($usage)" >&2; exit 2 ;;
  esac
done
if [ "$kind" = stripped ] || [ "$kind" = musl ] && [ -n "$jemalloc" ]; then
  echo "build-ruby.sh: --jemalloc does not go with --$kind ($usage)" >&2
  exit 2
fi

# family is MAJOR.MINOR; release the patch release asked for, if one was.
family=$version release=
case "$version" in
  *.*.*) family=${version%.*} release=$version ;;
esac

rubies=${RBSCOPE_RUBIES:-/var/cache/rbscope/rubies}
srcdir=${RBSCOPE_RUBY_SRC:-/var/cache/rbscope/src}
name="ruby-$version-$kind$jemalloc"
prefix="$rubies/$name"

# Every test user must reach the builds (the container tests run them as
# an unprivileged user in a user namespace): the builds' directory and,
# when it is the default one, /var/cache/rbscope above it, which an older
# rbscope run as root made 0700 for its own caches; builds made before
# are opened too.
mkdir -p "$rubies"
chmod 755 "$rubies"
case "$rubies" in /var/cache/rbscope/*) chmod 755 /var/cache/rbscope ;; esac

# Several builds may run at once (make rubies runs two): each build holds
# its own lock for its whole run, so that a stripped copy waits for the
# shared build it copies, and the steps they share (apt, the source
# download, musl's libffi) each hold a lock of their own.
exec 9>"$rubies/.$name.lock"
flock 9

if [ -x "$prefix/bin/ruby" ] && [ -f "$prefix/.rbscope-complete" ]; then
  echo "$prefix"
  exit 0
fi

# need PACKAGE... installs the Debian packages that are missing.
need() {
  (
    flock 8
    local missing=()
    for p in "$@"; do
      dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2 || {
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
      }
    fi
  ) 8>"$rubies/.apt.lock"
}

if [ "$kind" = stripped ]; then
  # A stripped copy of the shared debug build.
  shared=$("$0" "$version")
  need binutils patchelf
  rm -rf "$prefix" "$prefix.tmp"
  cp -a "$shared" "$prefix.tmp"
  rm -f "$prefix.tmp/.rbscope-complete"
  for f in "$prefix.tmp"/lib/libruby.so.*.*.* "$prefix.tmp/bin/ruby"; do
    [ -L "$f" ] && continue
    strip --strip-debug "$f"
    strip "$f" # drops .symtab too: only .dynsym is left
  done
  # The copy must load its own (stripped) libruby, not the shared build's.
  patchelf --set-rpath '$ORIGIN/../lib' "$prefix.tmp/bin/ruby"
  for f in "$prefix.tmp"/lib/libruby.so.*.*.* "$prefix.tmp/bin/ruby"; do
    if readelf -S "$f" | grep -qE '\.debug_info|\.symtab'; then
      echo "build-ruby.sh: $f still has .debug_info or .symtab" >&2
      exit 1
    fi
  done
  touch "$prefix.tmp/.rbscope-complete"
  mv "$prefix.tmp" "$prefix"
  echo "$prefix"
  exit 0
fi

case "$family" in
  2.7) pkg=ruby2.7 suite=bullseye ;;
  3.1) pkg=ruby3.1 suite=bookworm ;;
  3.3) pkg=ruby3.3 suite=trixie ;;
  3.4) pkg=ruby3.4 suite=experimental ;;
  *) echo "build-ruby.sh: no Debian source package known for Ruby $version (known: 2.7, 3.1, 3.3, 3.4)" >&2; exit 1 ;;
esac

# ensure_deb_src adds a deb-src entry for $suite, in a file of its own, when
# apt does not know $pkg's source yet.
ensure_deb_src() {
  local list=/etc/apt/sources.list.d/rbscope-src-$suite.sources
  if ! apt-cache showsrc "$pkg" 2>/dev/null | grep -q '^Package:'; then
    if [ ! -f "$list" ]; then
      cat >"$list" <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $suite
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    fi
    apt-get update -qq >&2
  fi
}

mkdir -p "$srcdir" "$rubies"
exec 7>"$srcdir/.download.lock"
flock 7
# find_orig prints the upstream tarball already downloaded: the release's,
# or for a family the oldest release's (3.4.5 before 3.4.11).
find_orig() {
  if [ -n "$release" ]; then
    ls "$srcdir"/${pkg}_${release}.orig.tar.* 2>/dev/null | head -1 || true
  else
    ls "$srcdir"/${pkg}_${family}.*.orig.tar.* 2>/dev/null | sort -V | head -1 || true
  fi
}
orig=$(find_orig)
if [ -z "$orig" ]; then
  ensure_deb_src
  need dpkg-dev
  # Take the oldest version that the archive still serves in full (of the
  # release asked for, when one was).
  for v in $(apt-cache showsrc "$pkg" | awk '/^Version:/{print $2}' | sort -uV); do
    if [ -n "$release" ] && [ "${v%%-*}" != "$release" ]; then
      continue
    fi
    (cd "$srcdir" && apt-get source --download-only "$pkg=$v" >&2) && break || true
  done
  orig=$(find_orig)
  [ -n "$orig" ] || { echo "build-ruby.sh: could not download the $pkg source package${release:+ of $release}" >&2; exit 1; }
fi
flock -u 7

# build_ffi_musl builds libffi (Debian's source) with musl-gcc, static and
# position-independent, into $srcdir/libffi-musl once: Fiddle, which tests
# use to call and crash in C, links it into its extension.
build_ffi_musl() {
  local ffi=$srcdir/libffi-musl
  if [ -f "$ffi/.rbscope-complete" ]; then
    return
  fi
  local src v
  src=$(ls "$srcdir"/libffi_*.orig.tar.* 2>/dev/null | sort -V | head -1 || true)
  if [ -z "$src" ]; then
    need dpkg-dev
    # The oldest version the archive serves in full (a failed download
    # may leave part of one behind: it is removed).
    for v in $(apt-cache showsrc libffi | awk '/^Version:/{print $2}' | sort -uV); do
      if (cd "$srcdir" && apt-get source --download-only "libffi=$v" >&2); then
        src=$(ls "$srcdir"/libffi_"${v%-*}".orig.tar.* 2>/dev/null | head -1 || true)
        break
      fi
      rm -f "$srcdir"/libffi_"${v%-*}"[.-]*
    done
    [ -n "$src" ] || { echo "build-ruby.sh: could not download the libffi source package" >&2; exit 1; }
  fi
  local w
  w=$(mktemp -d "$srcdir/build-libffi-musl.XXXXXX")
  rm -rf "$ffi"
  tar -C "$w" -xf "$src"
  (cd "$w"/libffi* &&
    { [ -x configure ] || { need autoconf automake libtool && autoreconf -fi >"$w/autoreconf.log" 2>&1; }; } &&
    ./configure CC=musl-gcc CFLAGS="-O2 -g" --prefix="$ffi" --disable-shared --enable-static \
      --with-pic --disable-docs --disable-multi-os-directory --disable-exec-static-tramp >"$w/configure.log" 2>&1 &&
    make -j"$(nproc)" >"$w/make.log" 2>&1 && make install >"$w/install.log" 2>&1) ||
    { tail -n 20 "$w"/*.log >&2; rm -rf "$w"; exit 1; }
  rm -rf "$w"
  touch "$ffi/.rbscope-complete"
}

extra=()
if [ "$kind" = musl ]; then
  exec 6>"$srcdir/.libffi-musl.lock"
  flock 6
  case "$family" in
    2.* | 3.[0-2]) echo "build-ruby.sh: --musl builds Ruby 3.3 and later only" >&2; exit 2 ;;
  esac
  # musl-gcc compiles and links against musl's headers and libc only, and
  # pkg-config must find no library built for glibc: only libffi's own.
  need gcc make autoconf bison musl-tools pkg-config
  build_ffi_musl
  flock -u 6
  export PKG_CONFIG_LIBDIR=$srcdir/libffi-musl/lib/pkgconfig PKG_CONFIG_PATH=
  extra+=(CC=musl-gcc --disable-yjit --with-libffi-dir="$srcdir/libffi-musl"
    --with-out-ext=openssl,psych,zlib,readline,gdbm,dbm)
else
  # Build dependencies of a plain Ruby build. Ruby 3.3+ builds YJIT when it
  # finds rustc >= 1.58 on PATH: Debian's rustc is installed when none is.
  need gcc make autoconf bison libssl-dev libyaml-dev libffi-dev zlib1g-dev libgdbm-dev libreadline-dev
  [ -n "$jemalloc" ] && need libjemalloc-dev
  case "$family" in
    2.* | 3.[0-2]) ;;
    *) command -v rustc >/dev/null || need rustc ;;
  esac
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
# Ruby 2.7's installer writes the default gems' specs with rubygems'
# to_ruby, which requires openssl (not built here: see below) only to
# print signing certificates, which these specs have none of.
if [ "$family" = 2.7 ]; then
  sed -i -e "s/^    require 'openssl'\$/    begin; require 'openssl'; rescue LoadError; end/" \
    -e "s/unless current_value.is_a?(OpenSSL::PKey::RSA)/unless defined?(OpenSSL::PKey::RSA) \&\& current_value.is_a?(OpenSSL::PKey::RSA)/" \
    lib/rubygems/specification.rb
fi
[ -x configure ] || ./autogen.sh >"$work/autogen.log" 2>&1 || { tail -20 "$work/autogen.log" >&2; exit 1; }
shared_flag=--enable-shared
[ "$kind" = static ] && shared_flag=--disable-shared
# Ruby 2.7's openssl extension does not build against OpenSSL 3; the VM
# rbscope reads does not need it.
[ "$family" = 2.7 ] && extra+=(--with-out-ext=openssl)
[ -n "$jemalloc" ] && extra+=(--with-jemalloc)
rm -rf "$prefix"
./configure --prefix="$prefix" "$shared_flag" --disable-install-doc "${extra[@]}" \
  optflags="-O2" debugflags="-ggdb3" >"$work/configure.log" 2>&1 ||
  { tail -20 "$work/configure.log" >&2; exit 1; }
grep -iE '^ *\* (YJIT|RJIT) support' "$work/configure.log" >&2 || true
if [ -n "$jemalloc" ] && ! grep -q -- '-ljemalloc' "$work/configure.log" config.status 2>/dev/null; then
  echo "build-ruby.sh: configure did not take --with-jemalloc (see $work/configure.log)" >&2
  exit 1
fi
make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -30 "$work/make.log" >&2; exit 1; }
make install >"$work/install.log" 2>&1 || { tail -30 "$work/install.log" >&2; exit 1; }
touch "$prefix/.rbscope-complete"
echo "$prefix"
