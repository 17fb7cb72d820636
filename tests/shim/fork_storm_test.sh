#!/usr/bin/env bash
# fork() at any instant (issue 25): tests/shim/fork_storm.cpp without libslice and under it, on the
# simulated GPU with a slow NVML start. No child may hang, and under libslice each child must get
# the answers it gets without it.
# Usage: fork_storm_test.sh LIBSLICE SIMGPU_DIR FORK_STORM [CHILDREN]
set -u
slice=$1 simdir=$2 storm=$3 children=${4:-1000}
export LD_LIBRARY_PATH=$simdir SIMGPU_NVML_START_US=200000
without=$("$storm" "$children" 256) || { echo "FAIL: children hung or failed without libslice:"; echo "$without"; exit 1; }
with=$(LD_PRELOAD=$slice SLICE_MEMORY_LIMIT=256Mi SLICE_TENANT=storm "$storm" "$children" 256)
rc=$?
echo "without libslice:"; echo "$without"
echo "with libslice:"; echo "$with"
[ $rc = 0 ] || { echo "FAIL: under libslice a child hung or failed"; exit 1; }
if [ "$(grep '^answers' <<< "$without")" != "$(grep '^answers' <<< "$with")" ]; then
  echo "FAIL: under libslice the children got other answers than the driver's and NVML's own"
  exit 1
fi
echo "ok: $children children forked beside a launching and a refusing thread, none hung, the driver's answers"
