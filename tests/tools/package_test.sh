#!/usr/bin/env bash
# The Debian packages, from this build folder to an installed tree: cpack builds them into the test's
# folder, lintian finds no error in them, and once extracted (dpkg-deb -x) the tools run from that
# tree alone, with nothing of the build folder on PATH or LD_LIBRARY_PATH and no RPATH into it:
# slice-run caps a program on the simulated GPU at 1 GiB (it is told 1 GiB and refused past it),
# slicectl status shows it while it runs, and slice-vars, slice-cdi-gen (and slice-device-plugin,
# when its package is built) answer --help. The simulated driver's folder on LD_LIBRARY_PATH is the
# GPU driver, not part of libslice.
# Usage (under tests/run_isolated.sh): package_test.sh BUILD_DIR SIMGPU_DIR PROBE PYTHON
# PROBE is simgpu-load. Exit 77 (skipped) when cpack, dpkg-deb, dpkg-shlibdeps, lintian, file or
# readelf is missing.
set -u
build=$1 simdir=$2 probe=$3 python=$4
tmp=${SLICE_TEST_TMPDIR:?run me under tests/run_isolated.sh}
for tool in cpack dpkg-deb dpkg-shlibdeps lintian file readelf; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIP: $tool is not installed (scripts/setup.sh installs lintian, dpkg-dev and file)"
    exit 77
  fi
done

fail=0
check() {  # what, status (0: ok)
  if [ "$2" = 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
holder=
cleanup() { [ -n "$holder" ] && kill "$holder" 2>/dev/null && wait "$holder" 2>/dev/null; }
trap cleanup EXIT

# ---- the packages ----
# CPack first runs the build folder's "preinstall" target (a make run there) when the generator it
# is told has one. The build folder is shared and built under a lock, and ctest runs after the
# build, so the test names a generator without that step: cpack then only installs and packs.
# The install step writes its manifests into the build folder; those this test made, it removes.
manifests=()
for m in "$build"/install_manifest_{libslice,device_plugin}.txt; do [ -e "$m" ] || manifests+=("$m"); done
cpack --config "$build/CPackConfig.cmake" -G DEB -B "$tmp/pkg" -D CPACK_CMAKE_GENERATOR=Ninja > "$tmp/cpack.log" 2>&1
rc=$?
rm -f "${manifests[@]}"
if [ $rc != 0 ]; then
  cat "$tmp/cpack.log"
  echo "FAIL: cpack could not build the packages"
  exit 1
fi
debs=("$tmp"/pkg/*.deb)
printf 'built %s\n' "${debs[@]##*/}"
[ -e "$tmp/pkg/libslice_"*.deb ]; check "the libslice package is built" $?
plugin_deb=
if [ -x "$build/bin/slice-device-plugin" ]; then
  plugin_deb=$(ls "$tmp"/pkg/libslice-device-plugin_*.deb 2>/dev/null)
  [ -n "$plugin_deb" ]; check "the libslice-device-plugin package is built" $?
fi
for deb in "${debs[@]}"; do
  echo "--- ${deb##*/}: dpkg-deb --field"
  dpkg-deb --field "$deb" Package Version Architecture Depends Section Priority
done

# lintian: no error. Whatever else it says is shown; the packages' overrides say why, in
# packaging/lintian/. Its temporary files go to this test's folder: lintian leaves some behind
# (Perl's MLDBM caches, mldbm-elf-*), which in the system's /tmp would outlive the test.
mkdir -p "$tmp/lintian-tmp"
touch "$tmp/lintian.stamp"
TMPDIR="$tmp/lintian-tmp" timeout 150 lintian --fail-on error --tag-display-limit 0 "${debs[@]}" > "$tmp/lintian.log" 2>&1
rc=$?
left=$(find "${TMPDIR:-/tmp}" -maxdepth 1 -name 'mldbm-*' -newer "$tmp/lintian.stamp" 2>/dev/null | head -3)
[ -z "$left" ]; check "lintian left nothing in ${TMPDIR:-/tmp}${left:+ (it left $left)}" $?
grep -v "running with root privileges" "$tmp/lintian.log"
check "lintian reports no error (exit $rc)" $rc

# ---- extracted, and run from there alone ----
root=$tmp/root
for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$root" || check "dpkg-deb -x ${deb##*/}" 1; done
library=$(find "$root/usr/lib" -path '*/libslice/libslice.so' | head -1)
[ -n "$library" ]; check "libslice.so is in its private folder (${library#"$root"})" $?
for f in usr/bin/slice-run usr/bin/slicectl usr/bin/slice-vars usr/bin/slice-cdi-gen \
         usr/share/doc/libslice/copyright usr/share/doc/libslice/changelog.Debian.gz \
         usr/share/doc/libslice/README.md usr/share/doc/libslice/docs/install.md \
         usr/share/doc/libslice/examples/README.md usr/share/man/man1/slice-run.1.gz \
         usr/lib/tmpfiles.d/libslice.conf usr/lib/sysusers.d/libslice.conf \
         usr/lib/systemd/system/libslice-prepare.service \
         usr/lib/systemd/system/libslice-archive.timer; do
  [ -f "$root/$f" ]; check "installed: /$f" $?
done
if [ -n "$plugin_deb" ]; then
  [ -x "$root/usr/bin/slice-device-plugin" ]; check "installed: /usr/bin/slice-device-plugin" $?
fi
if find "$root" -name 'libcuda*' -o -name 'libnvidia-ml*' -o -name 'simgpu*' | grep -q .; then
  check "nothing of the simulated GPU is packaged" 1
fi

# Every ELF file: stripped, no RPATH or RUNPATH at all (so none into the build folder); libslice.so
# needs only glibc, libstdc++ and libgcc.
while IFS= read -r -d '' f; do
  readelf -h "$f" >/dev/null 2>&1 || continue
  name=${f#"$root"}
  if readelf -d "$f" | grep -qE '\((RPATH|RUNPATH)\)'; then
    check "$name has no RPATH/RUNPATH: $(readelf -d "$f" | grep -E 'RPATH|RUNPATH')" 1
  fi
  if readelf -S "$f" | grep -qE ' \.(symtab|debug_info) '; then check "$name is stripped" 1; fi
done < <(find "$root" -type f -print0)
needed=$(readelf -d "$library" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
extra=$(printf '%s\n' $needed | grep -vE '^(libc\.so\.6|libm\.so\.6|libstdc\+\+\.so\.6|libgcc_s\.so\.1|ld-linux.*|libdl\.so\.2|libpthread\.so\.0)$')
[ -z "$extra" ]; check "libslice.so needs only glibc, libstdc++ and libgcc ($needed)" $?
if grep -rqF "$build" "$root/usr/lib/systemd" "$root/usr/lib/tmpfiles.d"; then
  check "the units and the tmpfiles.d entry name no build path" 1
fi
grep -q '^ExecStart=/usr/bin/slicectl prepare$' "$root/usr/lib/systemd/system/libslice-prepare.service"
check "libslice-prepare.service runs /usr/bin/slicectl prepare" $?
if command -v systemd-analyze >/dev/null; then
  # systemd's own check of the units, their /usr/bin/slicectl pointed at the extracted one.
  mkdir "$tmp/units"
  for unit in "$root"/usr/lib/systemd/system/*; do
    sed "s#/usr/bin/slicectl#$root/usr/bin/slicectl#" "$unit" > "$tmp/units/${unit##*/}"
  done
  out=$(systemd-analyze verify --man=no "$tmp"/units/* 2>&1)
  check "systemd-analyze verify accepts the units${out:+: $out}" $?
fi

# A clean environment: the extracted tree's bin first, the simulated driver, this test's
# coordinator (and policy folder and archive, where run_isolated.sh sets them) and simulator state;
# no LD_PRELOAD, no LIBSLICE_PATH, nothing from the build folder.
clean_env=(env -i HOME="$tmp" PATH="$root/usr/bin:/usr/bin:/bin" LD_LIBRARY_PATH="$simdir"
           SLICE_COORDINATOR_DIR="$SLICE_COORDINATOR_DIR" SIMGPU_STATE="$SIMGPU_STATE"
           SIMGPU_VIOLATIONS="$SIMGPU_VIOLATIONS" SIMGPU_MEMORY=16Gi)
for v in SLICE_POLICY_DIR SLICECTL_ARCHIVE; do [ -n "${!v:-}" ] && clean_env+=("$v=${!v}"); done
installed() { "${clean_env[@]}" "$@"; }
[ "$(installed sh -c 'command -v slice-run')" = "$root/usr/bin/slice-run" ]
check "slice-run is the extracted one" $?

# A holder: 512 MiB of its tenant's 1 GiB, answering a request every 100 ms until it is stopped.
# Started without a shell function in between, so that $! is the program's PID (env and slice-run exec).
"${clean_env[@]}" slice-run --memory 1Gi --tenant pkg-probe -- "$probe" --alloc-mib 512 --show-memory 1 \
  --requests 600 --gap-us 100000 > "$tmp/holder.out" 2> "$tmp/holder.err" &
holder=$!
for _ in $(seq 200); do
  grep -q ready "$tmp/holder.out" && break
  kill -0 "$holder" 2>/dev/null || break
  sleep 0.1
done
grep -q ready "$tmp/holder.out"; rc=$?  # (a status is taken before any $(...) in a message)
check "the program runs under the installed slice-run$(head -c 600 "$tmp/holder.err" | grep -v cuMemGetInfo | sed 's/^/: /')" $rc
grep -q "cuMemGetInfo: total 1.0 GiB" "$tmp/holder.err"; rc=$?
check "it is told its 1 GiB cap ($(grep cuMemGetInfo "$tmp/holder.err"))" $rc
grep -qF " $library" "/proc/$holder/maps"; check "it preloads the installed libslice.so" $?
from_build=$(grep -F "$build/" "/proc/$holder/maps" | awk '{print $6}' | sort -u | grep -vF "$simdir/" | grep -vxF "$probe")
[ -z "$from_build" ]
check "it maps nothing of the build folder but the simulated driver and the probe${from_build:+: $from_build}" $?

out=$(installed slice-run --memory 1Gi --tenant pkg-probe -- "$probe" --seconds 0 --alloc-mib 768 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q CUDA_ERROR_OUT_OF_MEMORY
check "768 MiB more in the same tenant (past 1 GiB) is refused (exit $rc)" $?
echo "$out" | grep -q refused; rc=$?
check "and libslice says why: $(echo "$out" | grep refused | head -1)" $rc
out=$(installed slice-run --memory 1Gi --tenant pkg-alone -- "$probe" --seconds 0 --alloc-mib 1100 2>&1); rc=$?
[ $rc != 0 ] && echo "$out" | grep -q CUDA_ERROR_OUT_OF_MEMORY
check "1100 MiB in a tenant of its own with a 1 GiB cap is refused (exit $rc)" $?
out=$(installed slice-run --memory 1Gi --tenant pkg-alone -- "$probe" --seconds 0 --alloc-mib 256 2>&1); rc=$?
check "256 MiB under the cap is allocated (exit $rc)" $rc

out=$(installed slicectl status 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] && echo "$out" | grep -qE "^ +pkg-probe +512\.0 MiB .* 1\.0 GiB"
check "slicectl status shows the tenant, its 512 MiB and its 1 GiB cap" $?
echo "$out" | grep -qE "^ +$holder "; check "and its process $holder" $?
installed slicectl status --json > "$tmp/status.json"; rc=$?
"$python" - "$tmp/status.json" "$holder" <<'EOF'
import json, sys
status = json.load(open(sys.argv[1]))
tenants = [t for d in status["devices"] for t in d["tenants"] if t["name"] == "pkg-probe"]
assert tenants, "no pkg-probe tenant"
t = tenants[0]
assert t["memory_limit_bytes"] == 1 << 30, t["memory_limit_bytes"]
assert t["memory_used_bytes"] >= 512 << 20, t["memory_used_bytes"]
assert int(sys.argv[2]) in [p["pid"] for p in t["processes"]], t["processes"]
EOF
check "slicectl status --json has the tenant, its cap, its usage and its process (exit $rc)" $?
cleanup
holder=

installed slice-vars --help > "$tmp/vars.out" 2>&1; check "slice-vars --help" $?
installed slice-vars --help-text | grep -q SLICE_MEMORY_LIMIT; check "slice-vars --help-text lists the variables" $?
installed slice-cdi-gen --help > "$tmp/cdi.out" 2>&1; check "slice-cdi-gen --help" $?
if [ -n "$plugin_deb" ]; then
  installed slice-device-plugin --help > "$tmp/plugin.out" 2>&1; check "slice-device-plugin --help" $?
fi

# The sysusers.d and tmpfiles.d entries, applied to the extracted tree as its root (root only: they
# chown), in the postinst's order: the group first.
if [ "$(id -u)" = 0 ] && command -v systemd-tmpfiles >/dev/null && command -v systemd-sysusers >/dev/null; then
  mkdir -p "$root/etc" && touch "$root/etc/passwd" "$root/etc/group"
  systemd-sysusers --root="$root" "$root/usr/lib/sysusers.d/libslice.conf" > "$tmp/sysusers.log" 2>&1
  rc=$?
  grep -q '^libslice:' "$root/etc/group"; ok=$?
  check "systemd-sysusers makes the group libslice (exit $rc)$(cat "$tmp/sysusers.log")" $((rc | ok))
  systemd-tmpfiles --create --root="$root" "$root/usr/lib/tmpfiles.d/libslice.conf" > "$tmp/tmpfiles.log" 2>&1
  rc=$?
  [ $rc = 0 ] && [ ! -s "$tmp/tmpfiles.log" ]; ok=$?
  check "systemd-tmpfiles applies the entry without a complaint (exit $rc)$(cat "$tmp/tmpfiles.log")" $ok
  gid=$(awk -F: '$1 == "libslice" { print $3 }' "$root/etc/group")  # the tree's group, not this machine's
  [ -n "$gid" ] && [ "$(stat -c %a:%u:%g "$root/dev/shm/libslice" "$root/dev/shm/libslice/tenants" \
       "$root/dev/shm/libslice/locks" "$root/etc/libslice/policy" "$root/var/lib/libslice" 2>&1 | tr '\n' ' ')" = \
    "1770:0:$gid 1777:0:0 1777:0:0 755:0:0 755:0:0 " ]
  check "it makes the coordinator folder 1770 root:libslice, tenants/ and locks/ 1777, the policy and archive folders 755" $?
fi
exit $fail
