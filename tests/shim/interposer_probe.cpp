// Runs under LD_PRELOAD with libslice.so and one or two interposers (tests/shim/interposer.cpp) in
// a given order; the program is linked with the driver, so its calls bind through the global scope.
//
//   interposer_probe CAP_BYTES SEEN...
//
// SEEN names the interposers preloaded before libslice: each must see every call the program makes
// (a chain that skips one breaks that tool), and libslice, wherever it is in the order, must hold the
// cap (no interposer may reach the driver around it). Exit 3 from an interposer: it recursed.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const unsigned long long cap = std::strtoull(argv[1], nullptr, 10);
  int failures = 0;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "interposer_probe: the driver did not start\n");
    return 2;
  }
  CUdeviceptr small = 0, large = 0;
  if (cuMemAlloc_v2(&small, 16 << 20) != CUDA_SUCCESS) {
    std::fprintf(stderr, "interposer_probe: 16 MiB refused\n");
    ++failures;
  }
  if (cuMemAlloc_v2(&large, cap) != CUDA_ERROR_OUT_OF_MEMORY) {
    std::fprintf(stderr, "interposer_probe: the whole cap beside 16 MiB was not refused: the cap did not hold\n");
    ++failures;
  }
  for (int i = 2; i < argc; ++i) {
    const std::string counter = std::string("interposer_calls_") + argv[i];
    const auto* calls = static_cast<const int*>(dlsym(RTLD_DEFAULT, counter.c_str()));
    if (calls == nullptr || *calls != 3) {
      std::fprintf(stderr, "interposer_probe: interposer %s saw %d of the program's 3 calls\n", argv[i],
                   calls != nullptr ? *calls : -1);
      ++failures;
    }
  }
  if (small != 0) cuMemFree_v2(small);
  if (failures == 0) std::printf("interposers ok\n");
  return failures == 0 ? 0 : 1;
}
