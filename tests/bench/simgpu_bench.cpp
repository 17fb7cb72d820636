// The simulator's own cost per driver call: the floor under every later measurement of libslice.
// Prints host nanoseconds per kernel launch and per alloc+free pair (median of several rounds).
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

const char kPtx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry spin(.param .u64 spin_param_0) { ret; }\n";

#define CHECK(call)                                                         \
  do {                                                                      \
    CUresult r_ = (call);                                                   \
    if (r_ != CUDA_SUCCESS) {                                               \
      std::fprintf(stderr, "%s failed: %d\n", #call, static_cast<int>(r_)); \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

double now_ns() {
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  CHECK(cuInit(0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CUfunction spin;
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&spin, mod, "spin"));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

  // Launch: zero-length spin kernels, so the device never holds the host back.
  std::vector<double> launch;
  unsigned long long zero = 0;
  void* params[] = {&zero};
  const int launches = 20000;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = now_ns();
    for (int i = 0; i < launches; ++i) CHECK(cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr));
    launch.push_back((now_ns() - t0) / launches);
    CHECK(cuStreamSynchronize(stream));
  }

  // Alloc + free of 1 MiB.
  std::vector<double> pair;
  const int pairs = 20000;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = now_ns();
    for (int i = 0; i < pairs; ++i) {
      CUdeviceptr p;
      CHECK(cuMemAlloc(&p, 1 << 20));
      CHECK(cuMemFree(p));
    }
    pair.push_back((now_ns() - t0) / pairs);
  }

  // Free (and re-alloc) with 10,000 other live allocations.
  std::vector<CUdeviceptr> live(10000);
  for (auto& p : live) CHECK(cuMemAlloc(&p, 4096));
  std::vector<double> crowded;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = now_ns();
    for (int i = 0; i < 2000; ++i) {
      CUdeviceptr& p = live[(i * 7919) % live.size()];
      CHECK(cuMemFree(p));
      CHECK(cuMemAlloc(&p, 4096));
    }
    crowded.push_back((now_ns() - t0) / 2000);
  }
  for (auto p : live) CHECK(cuMemFree(p));

  std::printf("simgpu floor (median of %d rounds, host time per call)\n", rounds);
  std::printf("  %-44s %10.0f ns\n", "cuLaunchKernel", median(launch));
  std::printf("  %-44s %10.0f ns\n", "cuMemAlloc + cuMemFree (1 MiB)", median(pair));
  std::printf("  %-44s %10.0f ns\n", "cuMemFree + cuMemAlloc, 10,000 live", median(crowded));
  return 0;
}
