// Kernel launches, every variant: each passes the compute gate (shim/compute.h) on its way to the
// driver. The gate costs a few loads and an atomic add while it is open.
#include "compute.h"
#include "hook_support.h"
#include "launch_gate.h"

using namespace slice::shim;

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
