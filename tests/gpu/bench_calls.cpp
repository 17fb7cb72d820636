// Per-call costs on a real GPU, for tests/gpu/run.sh --bench: cuLaunchKernel of an empty kernel and
// a cuMemAlloc + cuMemFree pair (4 KiB to 1 MiB), the median over batches of 1000 calls. run.sh runs
// it alternately with and without LD_PRELOAD=libslice.so and reports the difference.
// Usage: bench_calls ROUNDS ; prints launch_ns=, alloc_free_ns=
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 20;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  CUmodule module = nullptr;
  CUfunction empty = nullptr;
  static const char kPtx[] = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry empty() { ret; }\n";
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx) ||
      cuModuleLoadData(&module, kPtx) || cuModuleGetFunction(&empty, module, "empty"))
    return std::puts("error=setup"), 1;
  CUstream s = nullptr;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  std::vector<double> launch, pairs;
  const std::size_t sizes[] = {4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20};
  for (int r = -1; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
    const double l = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 1000;
    cuStreamSynchronize(s);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) {
      CUdeviceptr p = 0;
      if (cuMemAlloc(&p, sizes[i % 5]) == CUDA_SUCCESS) cuMemFree(p);
    }
    const double a = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 1000;
    if (r >= 0) launch.push_back(l), pairs.push_back(a);  // the first round warms up
  }
  std::printf("launch_ns=%.0f\nalloc_free_ns=%.0f\n", median(launch), median(pairs));
  return 0;
}
