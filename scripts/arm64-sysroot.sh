#!/usr/bin/env bash
# arm64-sysroot.sh unpacks Debian's arm64 Ruby 3.1 (ruby3.1, libruby3.1)
# and the libraries it runs with into a sysroot,
# ${RBSCOPE_ARM64_SYSROOT:-/var/cache/rbscope/arm64/sysroot}, where the
# arm64 tests run it under qemu-aarch64-static:
#
#   qemu-aarch64-static -L SYSROOT SYSROOT/usr/bin/ruby3.1 prog.rb
#
# The packages come from the distribution's own archive (dpkg's arm64
# architecture is added, and apt-get download fetches them; nothing is
# installed). Prints the sysroot on success, skipping the work when it is
# already complete.
set -euo pipefail
root=${RBSCOPE_ARM64_SYSROOT:-/var/cache/rbscope/arm64/sysroot}
if [ -f "$root/.rbscope-complete" ]; then
  echo "$root"
  exit 0
fi
packages="ruby3.1 libruby3.1 libc6 libgcc-s1 libcrypt1 libffi8 libgmp10
  libyaml-0-2 zlib1g libssl3 libedit2 libbsd0 libmd0 libncurses6 libtinfo6"
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  dpkg --add-architecture arm64
  apt-get update -qq
elif ! apt-cache show libruby3.1:arm64 >/dev/null 2>&1; then
  apt-get update -qq
fi
mkdir -p "$(dirname "$root")"
debs=$(mktemp -d "$(dirname "$root")/.debs.XXXXXX")
trap 'rm -rf "$debs"' EXIT
chmod 0755 "$debs"
(cd "$debs" && apt-get download -qq $(for p in $packages; do echo "$p:arm64"; done)) >&2
rm -rf "$root"
mkdir -p "$root"
for deb in "$debs"/*.deb; do
  dpkg -x "$deb" "$root"
done
# Debian's ruby3.1 finds its standard library under /usr/lib/ruby and its
# libraries under /usr/lib/aarch64-linux-gnu, which qemu's -L maps into
# the sysroot; the versions unpacked are kept beside it.
(cd "$debs" && ls *.deb) > "$root/.rbscope-packages"
touch "$root/.rbscope-complete"
echo "$root"
