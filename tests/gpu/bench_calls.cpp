// Per-call costs on a real GPU, for tests/gpu/run.sh --bench: cuLaunchKernel of an empty kernel and
// a cuMemAlloc + cuMemFree pair (4 KiB to 1 MiB), the median over batches of 1000 calls. run.sh runs
// it in processes alternately without and with LD_PRELOAD=libslice.so and compares the two sides.
//   bench_calls ROUNDS      prints launch_ns=, alloc_free_ns= (the medians of ROUNDS batches)
//   bench_calls --count N   exactly N launches, then N pairs, each set a phase of its own for
//                           syscount (phase_marker.h), after a warm-up: 0 start-up and warm-up,
//                           1 the launches, 2 the stream synchronised, 3 the pairs, 4 the end.
//                           Prints count_launches=, count_pairs=; exit 1 when a call fails.
#include <cuda.h>

#include "phase_marker.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

const std::size_t kSizes[] = {4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20};

bool pair(std::size_t i) {
  CUdeviceptr p = 0;
  return cuMemAlloc(&p, kSizes[i % 5]) == CUDA_SUCCESS && cuMemFree(p) == CUDA_SUCCESS;
}

// A known number of calls, for counting their system calls. The warm-up makes whatever is done once
// (the module's first launch, libslice's first launch and first allocation, the driver's pools)
// happen before the first marker.
int count(CUfunction empty, CUstream s, long n) {
  for (int i = 0; i < 100; ++i) {
    if (cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr) != CUDA_SUCCESS || !pair(i))
      return std::puts("error=warm-up"), 1;
  }
  if (cuStreamSynchronize(s) != CUDA_SUCCESS) return std::puts("error=warm-up"), 1;
  bool ok = true;
  phase_marker::mark(1);
  for (long i = 0; i < n; ++i)
    ok = cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr) == CUDA_SUCCESS && ok;
  phase_marker::mark(2);
  ok = cuStreamSynchronize(s) == CUDA_SUCCESS && ok;
  phase_marker::mark(3);
  for (long i = 0; i < n; ++i) ok = pair(static_cast<std::size_t>(i)) && ok;
  phase_marker::mark(4);
  std::printf("count_launches=%ld\ncount_pairs=%ld\n", n, n);
  return ok ? 0 : (std::puts("error=a call failed"), 1);
}

}  // namespace

int main(int argc, char** argv) {
  const bool counting = argc > 2 && std::strcmp(argv[1], "--count") == 0;
  const int rounds = argc > 1 && !counting ? std::atoi(argv[1]) : 20;
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
  if (counting) return count(empty, s, std::atol(argv[2]));
  std::vector<double> launch, pairs;
  for (int r = -1; r < rounds; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, s, nullptr, nullptr);
    const double l = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 1000;
    cuStreamSynchronize(s);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 1000; ++i) pair(i);
    const double a = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / 1000;
    if (r >= 0) launch.push_back(l), pairs.push_back(a);  // the first round warms up
  }
  std::printf("launch_ns=%.0f\nalloc_free_ns=%.0f\n", median(launch), median(pairs));
  return 0;
}
