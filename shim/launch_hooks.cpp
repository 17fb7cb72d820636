// Kernel launches: every launch passes the compute gate (shim/compute.h) on its way to the driver,
// which costs a few loads and an atomic add while it is open. The wrappers of the single-stream
// launches (cuLaunchKernel*, cuLaunchCooperativeKernel*, the deprecated cuLaunch/cuLaunchGrid*) are
// generated from hooked_functions.inc around gated_launch (launch_gate.h); this one is not.
#include "capture.h"
#include "compute.h"
#include "hook_support.h"
#include "launch_gate.h"

using namespace slice::shim;

namespace {
constexpr unsigned kMaxGatedDevices = slice::kMaxDevices;  // a multi-device launch across more passes ungated
}  // namespace

// One kernel per device, each into its own stream (and context): each device's gate is passed.
SLICE_HOOK_BODY(CUresult, cuLaunchCooperativeKernelMultiDevice)
(CUDA_LAUNCH_PARAMS* launchParamsList, unsigned int numDevices, unsigned int flags) {
  const auto call = [&] {
    return SLICE_CALL_REAL(cuLaunchCooperativeKernelMultiDevice, launchParamsList, numDevices, flags);
  };
  return accounted(
      [&](Session& s) {
        if (launchParamsList == nullptr || numDevices == 0 || numDevices > kMaxGatedDevices) return call();
        GateTicket tickets[kMaxGatedDevices];
        for (unsigned i = 0; i < numDevices; ++i) {
          const CUstream stream = launchParamsList[i].hStream;
          if (captures_active() && stream_is_capturing(stream, false)) continue;
          CUcontext ctx = nullptr;
          CUdevice dev = 0;
          if (SLICE_OWN_CALL(cuStreamGetCtx, stream, &ctx) != CUDA_SUCCESS ||
              SLICE_OWN_CALL(cuStreamGetDevice, stream, &dev) != CUDA_SUCCESS)
            continue;
          tickets[i] = gate_enter_in(s, CurrentContext{reinterpret_cast<std::uint64_t>(ctx), s.index_of(dev)}, stream,
                                     stream == CU_STREAM_PER_THREAD);
        }
        const CUresult rc = call();
        for (unsigned i = 0; i < numDevices; ++i) gate_leave(tickets[i], rc);
        return rc;
      },
      call);
}
