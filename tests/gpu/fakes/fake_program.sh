#!/usr/bin/env bash
# Stand-ins for the GPU programs of tests/gpu/run.sh, for its dry run: run.sh --dry-run links each
# program's name (preflight, spin_share, driver_cap, nvidia-smi, slicectl...) to this script and runs
# its whole GPU path on them, so that a mistake in the orchestration (a variable, a path, a file a
# judgement reads, an argument) shows without a GPU. They print what the real programs print, in the
# shapes run.sh reads, and behave as a working libslice would (shares followed, priority helping).
# Nothing here measures anything. FAKE_UNDER=1 in the environment stands for LD_PRELOAD=libslice.so;
# FAKE_NO_GPU=1 makes the preflight find no GPU.
set -u
me=$(basename "$0")
uuid=GPU-00000000-1111-2222-3333-444444444444
card_mib=143771
now_ns() { date +%s%N; }
case $me in
  preflight)
    [ "${FAKE_NO_GPU:-0}" = 1 ] && { echo "preflight=NO-GPU no libcuda.so.1 (stand-in)"; exit 3; }
    total=$((card_mib << 20))
    [ "${FAKE_UNDER:-0}" = 1 ] && [[ ${SLICE_MEMORY_LIMIT:-} =~ ^[0-9]+$ ]] && total=$SLICE_MEMORY_LIMIT
    printf 'driver_version=13000\ndevices=1\ndevice0=FAKE H200|%s|sm_90\nfree_bytes=%s\ntotal_bytes=%s\npreflight=ok\n' \
      "$uuid" "$total" "$total" ;;
  spin_share)
    [ "${1:-}" = --parse-only ] && shift
    case ${1:-} in
      busy)
        start=$3 seconds=$4 share=${SLICE_COMPUTE_SHARE:-100} limit=${SLICE_COMPUTE_LIMIT:-100}
        [ "$limit" -lt "$share" ] && share=$limit  # a hard limit holds alone too
        if [ "$start" != 0 ]; then
          left=$(((start - $(now_ns)) / 1000000))
          [ $left -gt 0 ] && sleep "$((left / 1000)).$(printf %03d $((left % 1000)))"
          late=$((($(now_ns) - start) / 1000000))
        else
          late=0
        fi
        echo "late_ms=$late"
        [ $late -le 50 ] || { echo "error=late: began measuring $late ms after the common start"; exit 5; }
        # Long enough to be listed by the stand-in nvidia-smi (a held process), else short.
        if [ "$start" = 0 ] && [ "${seconds%.*}" -ge 4 ]; then sleep 0.3; else sleep 0.05; fi
        awk -v s="$seconds" -v p="$share" 'BEGIN {printf "kernels=1000\ndevice_s=%.4f\nwindow_s=%.3f\ncpu_user_s=0.5\ncpu_sys_s=0.2\n", s * p / 100, s}' ;;
      serve)
        case ${SLICE_PRIORITY:-} in high) p99=1200 ;; normal) p99=5000 ;; *) p99=1100 ;; esac
        printf 'p50_us=1050\np99_us=%s\nmax_us=%s\ncpu_user_s=0.1\ncpu_sys_s=0.1\n' $p99 $p99 ;;
      *) echo "fake spin_share: bad arguments: $*" >&2; exit 2 ;;
    esac ;;
  driver_cap)
    if [ "${1:-}" = --probe ]; then
      for k in alloc pitch array async pool vmm managed graph ipc; do echo "probe $k: ok"; done
      echo "unsupported="
    else
      [ $# = 4 ] && [ "$3" = --unsupported ] || { echo "fake driver_cap: bad arguments: $*"; exit 2; }
      sleep 0.3
      echo "cuMemGetInfo: total $(($1 >> 20)) MiB"
      echo PASS
    fi ;;
  procaddr_real)
    [ "${2:-}" = --answers ] && printf 'cuInit\t2000\t0\t25880\n' > "$3"
    echo "procaddr_real: 440 rows, 440 at the exported address, 0 at another address, 0 wrong" ;;
  procaddr_replay)
    echo "440 rows: 74 libslice wrappers, 365 driver's own, 1 not found; 0 failures" ;;
  runtime_cap)
    for f in cuLaunchKernel cuLaunchKernelEx cuGraphLaunch; do
      echo "libslice[$$] trace: cuGetProcAddress: $f (12000, 0) -> $f, libslice's wrapper"
    done >> "${SLICE_LOG_FILE:-/dev/stderr}"
    echo "libslice[$$] trace: cuGetProcAddress: cuLaunchHostFunc (10000, 0) -> cuLaunchHostFunc, the driver's" >> "${SLICE_LOG_FILE:-/dev/stderr}"
    echo PASS ;;
  capture_threads) echo "captures_ok=3"; echo "replays_ok=3"; echo PASS ;;
  bench_calls)
    if [ "${1:-}" = --count ]; then
      # Traced by the stand-in syscount: the calls it would count, libslice's (FAKE_UNDER) included.
      n=$2 extra=0
      [ "${FAKE_UNDER:-0}" = 1 ] && extra=$n
      printf 'count_launches=%s\ncount_pairs=%s\n' "$n" "$n"
      if [ -n "${FAKE_SYSCOUNT_REPORT:-}" ]; then
        printf 'threads=2\nmarkers=4\ncalls 0 main 16 900\ncalls 1 main 228 %s\ncalls 3 main 16 %s\ncalls 1 other 202 3\n' \
          $((extra + 1)) $((2 * n)) >> "$FAKE_SYSCOUNT_REPORT"
      fi
    else
      printf 'launch_ns=2000\nalloc_free_ns=5000\n'
    fi ;;
  syscount)
    if [ "${1:-}" = --probe ]; then
      # The probe's known calls, as the real counter reports them.
      printf 'getppid_nr=110\ngetuid_nr=102\nprobe_n=%s\n' "$2"
      printf 'threads=2\nmarkers=3\ncalls 0 main 59 1\ncalls 1 main 110 %s\ncalls 1 main 102 %s\n' "$2" $(($2 / 2)) \
        >> "${FAKE_SYSCOUNT_REPORT:?the probe runs under syscount}"
      printf 'calls 2 other 110 %s\ncalls 3 main 234 1\ncalls 3 main 15 1\n' "$2" >> "$FAKE_SYSCOUNT_REPORT"
      exit 7
    fi
    [ "${1:-}" = -o ] && [ "${3:-}" = -- ] && [ $# -gt 3 ] || { echo "fake syscount: bad arguments: $*" >&2; exit 2; }
    report=$2
    shift 3
    echo "method=stand-in" > "$report"
    FAKE_SYSCOUNT_REPORT=$report "$@"
    rc=$?
    echo "exit_status=$rc" >> "$report"
    exit $rc ;;
  nvidia-smi)
    case "$*" in
      -L) echo "GPU 0: FAKE H200 (UUID: $uuid)" ;;
      *--query-gpu=compute_cap*) echo 9.0 ;;
      *--query-gpu=uuid,memory.total*) echo "$uuid, $card_mib" ;;
      *--query-compute-apps=pid,used_memory*)
        for p in $(pgrep -f '/driver_cap ' || true); do echo "$p, 4000"; done ;;
      *--query-compute-apps=pid*) pgrep -f '/spin_share ' || true ;;
      *) echo "fake nvidia-smi: $*" >&2; exit 2 ;;
    esac ;;
  slicectl)
    printf '{"devices":[{"index":0,"uuid":"%s","name":"FAKE H200","total_bytes":%s,"used_bytes":0,"tenants":[{"name":"torch-graph","device_seconds_total":1.5}]}],"coordinator":"","idle":false,"warnings":[]}\n' \
      "$uuid" $((card_mib << 20)) ;;
  slice-device-plugin)
    total=$((card_mib << 20))
    per=$((total / 4 >> 20 << 20))
    echo "GPU 0 $uuid FAKE H200: $total bytes, 4 slices of $per bytes and 25%"
    for k in 0 1 2 3; do echo "  $uuid::$k"; done ;;
  nvml_cycles)
    # As nvml_cycles.cpp prints: what 200 starts of NVML left.
    printf '%s\n' cycles=200 first_cycle_keys=1 first_cycle_descriptors=3 first_cycle_threads=1 \
      first_cycle_resident_kib=2048 all_cycles_keys=1 all_cycles_descriptors=3 all_cycles_threads=1 \
      all_cycles_resident_kib=2100 per_later_cycle_keys=0.00 per_later_cycle_descriptors=0.00 \
      per_later_cycle_threads=0.00 first_start_ms=11.00 later_start_median_ms=2.50 nvml_cycles=ok ;;
  nvml_reentry)
    # As nvml_reentry.cpp prints, on a driver whose NVML calls nvmlInitWithFlags from nvmlInit_v2.
    case " $* " in *" --context "*) echo "context=cuInit:0 cuDeviceGet:0 cuDevicePrimaryCtxRetain:0 retain_ms=300.0" ;; esac
    for round in 0 1; do echo "round$round=nvmlInit_v2:0 handle:0 processes:0 nvmlShutdown:0 init_ms=5.0 shutdown_ms=2.0"; done
    echo "after_last_shutdown=nvmlDeviceGetCount_v2:1 nvmlShutdown:1"
    [ "${1:-}" = --interposer ] && printf 'nested=nvmlInitWithFlags<nvmlInit_v2\nother_threads=none\n'
    echo "nvml_reentry=ok" ;;
  process_trace)
    # What process_trace_test.py reads: the same observations with and without libslice (told by
    # LD_PRELOAD), but the refusals and, from the launch on, the watcher thread; NVML's start brings
    # no key, thread or descriptor here.
    if [ "${1:-}" = --fds ]; then printf 'exec\tinherited descriptors\t\n'; exit 0; fi
    if [ "${1:-}" = --nvml-footprint ]; then
      printf 'footprint\t%s\t%s\n' keys 0 "threads before" "1: process_trace" threads "1: process_trace" \
        "descriptors before" "" descriptors ""
      exit 0
    fi
    [ -n "${LD_PRELOAD:-}" ] && under=1 || under=0
    for step in start cuInit context allocation refusal reconciliation launch nvml late end; do
      threads="1: process_trace"
      case $step in launch | nvml | late | end) [ $under = 1 ] && threads="2: process_trace slice-watcher" ;; esac
      printf '%s\t%s\t%s\n' "$step" "libc copies" 1 "$step" "key made first, never set" 0x0 \
        "$step" "key made first, set" 0x5eed "$step" threads "$threads" "$step" "inheritable descriptors" ""
    done
    printf 'refusal\tresult of cuMemAlloc_v2\t%s\n' $((under * 2))
    printf 'late\tresult of cuMemAlloc_v2 past the cap\t%s\n' $((under * 2))
    printf 'exec\tinherited descriptors\t\n'
    printf 'fork\t%s\texit 0\n' "child that exits" "child that calls the driver"
    printf 'fork\tchildren forked while a thread launches\t100 of 100 exited cleanly\n'
    printf 'faults\t%s\t1\n' "handler installed before CUDA ran" "handler installed after CUDA ran" ;;
  *) echo "fake_program.sh: no stand-in for $me" >&2; exit 2 ;;
esac
