// A privileged CUDA program (issue 29): the test copies it, makes the copy setuid root, and runs it as
// an unprivileged user with hostile SLICE_* values. It is linked with libslice.so and the simulated
// driver (absolute run paths: secure execution ignores LD_LIBRARY_PATH and LD_PRELOAD's relatives),
// as a program reached by /etc/ld.so.preload would have libslice.
//
//   secure_probe      cuInit, a context, an allocation; prints "euid E cuInit R alloc R"
#include <cuda.h>
#include <unistd.h>

#include <cstdio>

int main() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUdeviceptr p = 0;
  const CUresult init = cuInit(0);
  CUresult alloc = init;
  if (init == CUDA_SUCCESS && cuDeviceGet(&dev, 0) == CUDA_SUCCESS &&
      cuDevicePrimaryCtxRetain(&ctx, dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS)
    alloc = cuMemAlloc(&p, 1 << 20);
  std::printf("euid %d cuInit %d alloc %d\n", static_cast<int>(geteuid()), static_cast<int>(init),
              static_cast<int>(alloc));
  return init == CUDA_SUCCESS && alloc == CUDA_SUCCESS ? 0 : 1;
}
