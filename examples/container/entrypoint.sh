#!/bin/sh
# A container entrypoint that runs the container's command under libslice, with the limits from the
# container's environment (SLICE_MEMORY_LIMIT, SLICE_COMPUTE_SHARE, SLICE_PRIORITY, SLICE_TENANT ...).
#
#   ENTRYPOINT ["/usr/local/bin/slice-entrypoint"]
#   CMD ["python3", "serve.py"]
#
# slice-run checks every SLICE_* variable with libslice's own parser before the command starts, so a
# wrong value stops the container at once with a message naming the variable and a valid example,
# instead of failing at its first CUDA call. SLICE_DISABLE=1 runs the command without libslice.
# For the containers of one GPU to see each other's budgets, they must share the coordinator folder:
# mount the host's /dev/shm/libslice (or the folder SLICE_COORDINATOR_DIR names) into each of them.
set -eu

if [ "$#" -eq 0 ]; then
  echo "slice-entrypoint: no command to run (give the image a CMD, or pass one)" >&2
  exit 2
fi
if [ "${SLICE_DISABLE:-}" = 1 ]; then
  echo "slice-entrypoint: SLICE_DISABLE=1: running without libslice" >&2
  exec "$@"
fi

: "${LIBSLICE_PATH:=/usr/local/lib/libslice.so}"
export LIBSLICE_PATH
if [ ! -r "$LIBSLICE_PATH" ]; then
  echo "slice-entrypoint: $LIBSLICE_PATH is missing: copy libslice.so into the image, or set LIBSLICE_PATH" >&2
  exit 1
fi
coordinator=${SLICE_COORDINATOR_DIR:-/dev/shm/libslice}
if [ ! -d "$coordinator" ]; then
  # libslice creates it; say so, because a folder that is not mounted from the host is private to
  # this container and its budget then holds against nobody else.
  echo "slice-entrypoint: $coordinator does not exist yet: unless it is mounted from the host, this" \
       "container's budgets are not shared with other containers" >&2
fi
exec slice-run -- "$@"
