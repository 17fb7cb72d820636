#!/usr/bin/env bash
# examples/container/entrypoint.sh, as a container would run it: the command runs under libslice with
# the limits from the environment (capped, and told its cap), a wrong SLICE_* value stops it before
# the command runs, SLICE_DISABLE=1 runs it bare, and a missing library or command is a clear error.
# Usage: entrypoint_test.sh ENTRYPOINT BIN_DIR LIBSLICE SIMGPU_DIR
set -u
entry=$1 bin=$2 slice=$3 simdir=$4
fail=0
check() {  # what, condition status
  if [ "$2" = 0 ]; then echo "ok: $1"; else echo "FAIL: $1"; fail=1; fi
}
run() {  # the entrypoint with the test's PATH, library and simulator, plus "$@" as env assignments
  env PATH="$bin:$PATH" LIBSLICE_PATH="$slice" LD_LIBRARY_PATH="$simdir" SIMGPU_MEMORY=16Gi "$@"
}
load="$bin/simgpu-load"

out=$(run SLICE_MEMORY_LIMIT=1Gi "$entry" "$load" --seconds 0 --alloc-mib 512 --show-memory 1 2>&1); rc=$?
check "a 512 MiB allocation under a 1 GiB cap runs (exit $rc)" $((rc != 0))
echo "$out" | grep -q "cuMemGetInfo: total 1.0 GiB"; check "the program is told its 1 GiB cap" $?

out=$(run SLICE_MEMORY_LIMIT=1Gi "$entry" "$load" --seconds 0 --alloc-mib 2048 2>&1); rc=$?
check "a 2 GiB allocation over the 1 GiB cap is refused (exit $rc)" $((rc == 0))
echo "$out" | grep -q "refused"; check "libslice says why" $?

out=$(run SLICE_COMPUTE_SHARE=150 "$entry" echo command-ran 2>&1); rc=$?
check "an invalid SLICE_COMPUTE_SHARE stops the container with exit 2 (exit $rc)" $((rc != 2))
echo "$out" | grep -q "SLICE_COMPUTE_SHARE='150'"; check "the error names the variable and the value" $?
echo "$out" | grep -q "command-ran"; check "the command did not run" $((1 - $?))

out=$(run SLICE_DISABLE=1 SLICE_MEMORY_LIMIT=1Gi "$entry" "$load" --seconds 0 --show-memory 1 2>&1); rc=$?
echo "$out" | grep -q "cuMemGetInfo: total 16.0 GiB"; check "SLICE_DISABLE=1 runs the command without libslice" $?

out=$(run LIBSLICE_PATH=/nonexistent/libslice.so "$entry" true 2>&1); rc=$?
check "a missing libslice.so is exit 1 (exit $rc)" $((rc != 1))
echo "$out" | grep -q "/nonexistent/libslice.so is missing"; check "and says where it looked" $?

out=$(run "$entry" 2>&1); rc=$?
check "no command is exit 2 (exit $rc)" $((rc != 2))

exit $fail
