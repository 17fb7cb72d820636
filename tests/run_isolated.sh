#!/usr/bin/env bash
# Runs one test command with its own SLICE_COORDINATOR_DIR and SIMGPU_STATE in a fresh temporary
# directory, and removes that directory (and any process left in this test's process group) afterwards.
# The simulated driver reports every call the real driver would punish (a query of a capturing
# stream, a use of a destroyed handle...) into SIMGPU_VIOLATIONS: a test that leaves a report there
# fails, whatever it checked itself.
set -u
dir=$(mktemp -d "${TMPDIR:-/tmp}/slice-test.XXXXXX")
export SLICE_COORDINATOR_DIR="$dir/coordinator"
export SLICE_POLICY_DIR="$dir/policy"  # never the machine's own /etc/libslice/policy
export SLICECTL_ARCHIVE="$dir/usage.sqlite3"  # nor its /var/lib/libslice
export SIMGPU_STATE="$dir/simgpu-state"
export SIMGPU_VIOLATIONS="$dir/violations"
export SLICE_TEST_TMPDIR="$dir"
"$@"
rc=$?
# SIMGPU_VIOLATIONS_EXPECTED=1: the test breaks the rules on purpose and reads the file itself.
if [ -s "$dir/violations" ] && [ "${SIMGPU_VIOLATIONS_EXPECTED:-0}" != 1 ]; then
  echo "run_isolated: the simulated driver saw calls the real driver would punish:" >&2
  cat "$dir/violations" >&2
  [ $rc = 0 ] && rc=1
fi
rm -rf "$dir"
exit $rc
