#!/usr/bin/env bash
# Pass-through: the driver probes print the same with and without libslice preloaded and with
# SLICE_DISABLE=1, and get libslice's functions only when it is enabled; a process without a
# driver, and a non-CUDA one, runs exactly as without libslice.
# Usage: passthrough.sh LIBSLICE SIMGPU_DIR PROBE PROBE_LINKED
set -u
slice=$1 simdir=$2 probe=$3 probe_linked=$4
fail=0
check_same() {  # name, expected output, actual output
  if [[ "$2" != "$3" ]]; then
    echo "FAIL: $1 differs"; diff <(echo "$2") <(echo "$3"); fail=1
  else
    echo "ok: $1"
  fi
}
for p in "$probe" "$probe_linked"; do
  name=$(basename "$p")
  base=$(LD_LIBRARY_PATH=$simdir "$p" expect-driver) || { echo "FAIL: $name without libslice"; echo "$base"; fail=1; }
  with=$(LD_LIBRARY_PATH=$simdir LD_PRELOAD=$slice "$p" expect-slice) || { echo "FAIL: $name under libslice"; fail=1; }
  check_same "$name under LD_PRELOAD" "$base" "$with"
  # The linked probe binds hooked symbols to libslice at load time whatever SLICE_DISABLE says.
  [[ "$name" == *linked* ]] && disabled_expect=any || disabled_expect=expect-driver
  disabled=$(LD_LIBRARY_PATH=$simdir LD_PRELOAD=$slice SLICE_DISABLE=1 "$p" $disabled_expect) || { echo "FAIL: $name with SLICE_DISABLE=1"; fail=1; }
  check_same "$name with SLICE_DISABLE=1" "$base" "$disabled"
done
echo "$base" | grep -q '^cuInit 0$' || { echo "FAIL: the probe did not reach the simulator"; fail=1; }
# No driver at all: same output as without libslice.
nodrv_base=$(env -u LD_LIBRARY_PATH "$probe") ; nodrv=$(env -u LD_LIBRARY_PATH LD_PRELOAD=$slice "$probe")
check_same "no driver" "$nodrv_base" "$nodrv"
# Non-CUDA programs.
env -u LD_LIBRARY_PATH LD_PRELOAD=$slice /bin/true || { echo "FAIL: /bin/true"; fail=1; }
out=$(env -u LD_LIBRARY_PATH LD_PRELOAD=$slice python3 -c 'import ctypes, os; print(os.getpid() > 0)' 2>&1)
check_same "python3 without a driver" "True" "$out"
out=$(env -u LD_LIBRARY_PATH LD_PRELOAD=$slice sh -c 'echo hi | cat' 2>&1)
check_same "sh pipeline" "hi" "$out"
exit $fail
