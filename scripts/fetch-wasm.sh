#!/usr/bin/env bash
# fetch-wasm.sh fetches the npm packages @ruby/X.Y-wasm-wasi (CRuby built
# for wasm32-wasi, with DWARF) of 3.2, 3.3, 3.4 and 4.0 into
# ${RBSCOPE_WASM_DIR:-/var/cache/rbscope/wasm}/X.Y/package, where
# tools/layoutgen's tests make the built-in 3.2 and 4.0 tables again from
# them, and check the re-layout on 3.3 and 3.4 against x86_64 debug builds.
# Each tarball is checked against the sha1 npm published for it.
set -euo pipefail
dir=${RBSCOPE_WASM_DIR:-/var/cache/rbscope/wasm}
version=2.10.1
declare -A sha1=(
  [3.2]=3bae47bb7da6c9d2e5a71dba3c074a277b8d5f95
  [3.3]=61e7ca641d0407a99cee2db7342049fd3be0b42f
  [3.4]=f397c7adb3496b6657b67daf775ba30ccacaf860
  [4.0]=3ea6537a35dbeaf7a17fc1ac2687247b89071052
)
for fam in 3.2 3.3 3.4 4.0; do
  dest=$dir/$fam
  [ -f "$dest/package/dist/ruby.debug+stdlib.wasm" ] && continue
  mkdir -p "$dest"
  tgz=$(mktemp "$dest/.fetch.XXXXXX")
  trap 'rm -f "$tgz"' EXIT
  curl -fsSL --retry 3 -o "$tgz" "https://registry.npmjs.org/@ruby/$fam-wasm-wasi/-/$fam-wasm-wasi-$version.tgz"
  if [ "$(sha1sum < "$tgz" | cut -d' ' -f1)" != "${sha1[$fam]}" ]; then
    echo "fetch-wasm.sh: @ruby/$fam-wasm-wasi@$version does not have the published checksum" >&2
    exit 1
  fi
  rm -rf "$dest/package"
  tar -xzf "$tgz" -C "$dest" package/dist/ruby.debug+stdlib.wasm package/package.json
  rm -f "$tgz"
done
