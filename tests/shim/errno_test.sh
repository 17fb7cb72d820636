#!/usr/bin/env bash
# errno at every age, for every hooked export (issue 25): tests/shim/errno_every_hook.cpp without
# libslice and under it (a 256 MiB cap, a policy folder that does not exist), compared line by line.
# Usage: errno_test.sh LIBSLICE SIMGPU_DIR ERRNO_EVERY_HOOK
set -u
slice=$1 simdir=$2 probe=$3
export LD_LIBRARY_PATH=$simdir
without=$("$probe" 2> "$SLICE_TEST_TMPDIR/errno-without.err") || { echo "FAIL: the probe failed without libslice"; cat "$SLICE_TEST_TMPDIR/errno-without.err"; exit 1; }
with=$(LD_PRELOAD=$slice SLICE_MEMORY_LIMIT=256Mi SLICE_TENANT=errno SLICE_POLICY_DIR="$SLICE_TEST_TMPDIR/no-such-policy-folder" \
  "$probe" 2> "$SLICE_TEST_TMPDIR/errno-with.err") || { echo "FAIL: the probe failed under libslice"; cat "$SLICE_TEST_TMPDIR/errno-with.err"; exit 1; }
[ -n "$without" ] || { echo "FAIL: the probe printed nothing"; exit 1; }
if [ "$without" != "$with" ]; then
  echo "FAIL: errno after these hooked calls differs under libslice (name, round, errno):"
  diff <(echo "$without") <(echo "$with") | grep '^[<>]'
  exit 1
fi
echo "ok: $(grep -c . <<< "$without") calls, errno as without libslice after each; $(tail -n 1 "$SLICE_TEST_TMPDIR/errno-with.err")"
