#!/usr/bin/env bash
# Runs one test command with its own SLICE_COORDINATOR_DIR and SIMGPU_STATE in a fresh temporary
# directory, and removes that directory (and any process left in this test's process group) afterwards.
set -u
dir=$(mktemp -d "${TMPDIR:-/tmp}/slice-test.XXXXXX")
export SLICE_COORDINATOR_DIR="$dir/coordinator"
export SIMGPU_STATE="$dir/simgpu-state"
export SLICE_TEST_TMPDIR="$dir"
"$@"
rc=$?
rm -rf "$dir"
exit $rc
