#!/usr/bin/env bash
# libslice reaches an original driver or NVML function one way: SLICE_REAL(fn) (shim/shim.h). The
# pieces under it (the hook table's real_function, the look-ups by name, the library handles) are
# used only where that one way is built (shim/shim.h, shim/real_driver.cpp), and, for identity
# comparisons of cuGetProcAddress's answers, in shim/procaddr_hooks.cpp. Nothing is ever loaded into
# a link-map namespace of its own (dlmopen): that brings a second C library into the process (issue
# 22). Comments do not count.
#   one_way_to_the_driver.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: one_way_to_the_driver.sh SOURCE_DIR}
cd "$src/shim" || exit 2
fail=0
# pattern, the files allowed to use it
check() {
  local pattern=$1 allowed=$2 found
  found=$(grep -nE -- "$pattern" ./*.cpp ./*.h ./*.inc 2>/dev/null | grep -vE '^[^:]+:[0-9]+:\s*//' |
          grep -vE "^\./($allowed):" || true)
  if [ -z "$found" ]; then
    echo "ok: $pattern only in $allowed"
  else
    echo "FAIL: $pattern outside $allowed (use SLICE_REAL):"
    printf '%s\n' "$found"
    fail=1
  fi
}
check 'SLICE_REAL_(HOOK|CU|NVML)\(' 'none'
check 'real_(cuda|nvml)_symbol\(' 'shim\.h|real_driver\.cpp'
check 'real_function\(' 'shim\.h|real_driver\.cpp|procaddr_hooks\.cpp'
# Libraries are opened by the driver's handles, and for libunwind (backtraces); none in a namespace
# of its own.
check '\bdlopen\(' 'real_driver\.cpp|caller_backtrace\.cpp|crash_handler\.cpp|dlopen_hook\.cpp'
check '\bdlmopen\b' 'none'
check '\bdl(v)?sym\(RTLD_NEXT' 'real_driver\.cpp|dlopen_hook\.cpp'
exit $fail
