// Kernel launches, every variant: each passes the compute gate (shim/compute.h) on its way to the
// driver. The gate costs a few loads and an atomic add while it is open.
#include "capture.h"
#include "compute.h"
#include "hook_support.h"
#include "launch_gate.h"

using namespace slice::shim;

namespace {
constexpr unsigned kMaxGatedDevices = 16;  // a multi-device launch across more passes ungated
}  // namespace

extern "C" SLICE_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                                void** kernelParams, void** extra) {
  return gated_launch(hStream, false, [&] {
    return SLICE_CALL_REAL(cuLaunchKernel, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                           sharedMemBytes, hStream, kernelParams, extra);
  });
}

extern "C" SLICE_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                     unsigned int gridDimZ, unsigned int blockDimX,
                                                     unsigned int blockDimY, unsigned int blockDimZ,
                                                     unsigned int sharedMemBytes, CUstream hStream,
                                                     void** kernelParams, void** extra) {
  return gated_launch(hStream, true, [&] {
    return SLICE_CALL_REAL(cuLaunchKernel_ptsz, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                           sharedMemBytes, hStream, kernelParams, extra);
  });
}

extern "C" SLICE_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                                  void** extra) {
  return gated_launch(config != nullptr ? config->hStream : nullptr, false,
                      [&] { return SLICE_CALL_REAL(cuLaunchKernelEx, config, f, kernelParams, extra); });
}

extern "C" SLICE_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                                       void** kernelParams, void** extra) {
  return gated_launch(config != nullptr ? config->hStream : nullptr, true,
                      [&] { return SLICE_CALL_REAL(cuLaunchKernelEx_ptsz, config, f, kernelParams, extra); });
}

extern "C" SLICE_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                                           unsigned int gridDimZ, unsigned int blockDimX,
                                                           unsigned int blockDimY, unsigned int blockDimZ,
                                                           unsigned int sharedMemBytes, CUstream hStream,
                                                           void** kernelParams) {
  return gated_launch(hStream, false, [&] {
    return SLICE_CALL_REAL(cuLaunchCooperativeKernel, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                           blockDimZ, sharedMemBytes, hStream, kernelParams);
  });
}

extern "C" SLICE_EXPORT CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                                unsigned int blockDimX, unsigned int blockDimY,
                                                                unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                                CUstream hStream, void** kernelParams) {
  return gated_launch(hStream, true, [&] {
    return SLICE_CALL_REAL(cuLaunchCooperativeKernel_ptsz, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                           blockDimZ, sharedMemBytes, hStream, kernelParams);
  });
}

// The deprecated launches, still exported by the CUDA 13 driver: the block shape and parameters were
// set on the function before (cuFuncSetBlockShape, cuParamSet*), and the stream is the legacy one
// unless given.
extern "C" SLICE_EXPORT CUresult cuLaunch(CUfunction f) {
  return gated_launch(nullptr, false, [&] { return SLICE_CALL_REAL(cuLaunch, f); });
}

extern "C" SLICE_EXPORT CUresult cuLaunchGrid(CUfunction f, int grid_width, int grid_height) {
  return gated_launch(nullptr, false, [&] { return SLICE_CALL_REAL(cuLaunchGrid, f, grid_width, grid_height); });
}

extern "C" SLICE_EXPORT CUresult cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream) {
  return gated_launch(hStream, false,
                      [&] { return SLICE_CALL_REAL(cuLaunchGridAsync, f, grid_width, grid_height, hStream); });
}

// One kernel per device, each into its own stream (and context): each device's gate is passed.
extern "C" SLICE_EXPORT CUresult cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* launchParamsList,
                                                                      unsigned int numDevices, unsigned int flags) {
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
          if (call_real(SLICE_REAL(cuStreamGetCtx), stream, &ctx) != CUDA_SUCCESS ||
              call_real(SLICE_REAL(cuStreamGetDevice), stream, &dev) != CUDA_SUCCESS)
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
