#!/usr/bin/env bash
# Gathers what tests/gpu/run.sh needs from this machine's build into build/gpu-carry/ (about 25 MiB),
# for a GPU machine that has the toolkit but none of our Debian packages: libslice.so, slicectl,
# the device plugin, and the shared libraries the plugin needs beyond glibc and the C++ runtime
# (gRPC, protobuf, spdlog...). Carry that one folder; run.sh looks there when build/lib and build/bin are
# not present, and puts its runtime-libs/ on the plugin's library path.
#   tests/gpu/prepare_carry.sh   (after scripts/setup.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
carry=build/gpu-carry
rm -rf "$carry"
mkdir -p "$carry/lib" "$carry/bin" "$carry/runtime-libs"
[ -f build/lib/libslice.so ] || { echo "prepare_carry: build/lib/libslice.so is missing (scripts/setup.sh)"; exit 1; }
cp build/lib/libslice.so "$carry/lib/"
[ -x build/bin/slicectl ] && cp build/bin/slicectl "$carry/bin/"
plugin=build/bin/slice-device-plugin
if [ -x "$plugin" ]; then
  cp "$plugin" "$carry/bin/"
  # Every library the plugin resolves here, but the C library, libm, the C++ runtime and the loader,
  # which any machine with a compiler has.
  ldd "$plugin" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$carry/runtime-libs/"; done
fi
# Debug sections only make the folder heavier to carry (a device run carries at most 64 MiB); the
# symbols stay, so a crash report's frames still name what they can.
find "$carry" -type f -exec strip --strip-debug {} +
du -sh "$carry"
