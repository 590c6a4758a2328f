#!/usr/bin/env bash
# softdirty-kernel.sh unpacks the kernel of Debian's cloud kernel package
# (linux-image-*-cloud-amd64, built with CONFIG_MEM_SOFT_DIRTY) into
# ${RBSCOPE_SOFTDIRTY_KERNEL_DIR:-/var/cache/rbscope/softdirty-kernel}/vmlinuz,
# for internal/target's TestPrecopyOnSoftDirtyKernel, which boots it under
# qemu when the host's own kernel keeps no soft-dirty bits. Nothing is
# installed: the package is downloaded and unpacked. Prints the kernel's
# path, skipping the work when it is already there.
set -euo pipefail
dir=${RBSCOPE_SOFTDIRTY_KERNEL_DIR:-/var/cache/rbscope/softdirty-kernel}
if [ -f "$dir/.rbscope-complete" ]; then
  echo "$dir/vmlinuz"
  exit 0
fi
pkg=$(apt-cache search --names-only '^linux-image-[0-9.]+-[0-9]+-cloud-amd64$' | awk '{print $1}' | sort -V | tail -1)
[ -n "$pkg" ] || { echo "softdirty-kernel.sh: no linux-image-*-cloud-amd64 package known to apt (apt-get update first)" >&2; exit 1; }
mkdir -p "$(dirname "$dir")"
work=$(mktemp -d "$(dirname "$dir")/.kernel.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 0755 "$work"
(cd "$work" && apt-get download -qq "$pkg") >&2
dpkg -x "$work"/*.deb "$work/x"
grep -qx 'CONFIG_MEM_SOFT_DIRTY=y' "$work"/x/boot/config-* || { echo "softdirty-kernel.sh: $pkg is not built with CONFIG_MEM_SOFT_DIRTY" >&2; exit 1; }
rm -rf "$dir"
mkdir -p "$dir"
cp "$work"/x/boot/vmlinuz-* "$dir/vmlinuz"
echo "$pkg" > "$dir/.rbscope-package"
touch "$dir/.rbscope-complete"
echo "$dir/vmlinuz"
