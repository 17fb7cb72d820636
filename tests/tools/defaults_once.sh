#!/usr/bin/env bash
# The default folders (the coordinator's and the policy's) are spelled once in the code:
# libslice/config/config_values.h names them, and the library, the tools, their help texts and the variable
# table use that name. A second spelling would drift the day one of them changes.
#   defaults_once.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: defaults_once.sh SOURCE_DIR}
fail=0
for literal in /dev/shm/libslice /etc/libslice/policy; do
  found=$(cd "$src" && grep -rnF --include='*.cpp' --include='*.h' --include='*.inc' --include='*.cc' \
            -e "$literal" libslice shim tools include)
  n=$(printf '%s' "$found" | grep -c . || true)
  if [ "$n" = 1 ] && printf '%s' "$found" | grep -q '^libslice/config/config_values.h:'; then
    echo "ok: $literal is spelled once, in libslice/config/config_values.h"
  else
    echo "FAIL: $literal is spelled $n times in the code; name SLICE_DEFAULT_* (libslice/config/config_values.h) instead:"
    printf '%s\n' "$found"
    fail=1
  fi
done
exit $fail
