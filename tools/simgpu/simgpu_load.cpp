// simgpu-load: a small CUDA driver-API program that loads a GPU the way a busy client does: it
// optionally allocates memory, then keeps the device busy with spin kernels of a given length for a
// given time. Prints "ready" once its memory is allocated and its first kernels are queued, so tests,
// benchmarks and the demo know when to measure or kill it. Works on the simulated GPU; on a real one
// the PTX kernel returns at once.
#include <cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// A spin kernel in PTX: the simulator runs it for its first parameter in nanoseconds.
const char kSpinPtx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry spin(.param .u64 spin_param_0) { ret; }\n";

int fail(const char* what, CUresult r) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  std::fprintf(stderr, "simgpu-load: %s failed: %s\n", what, name ? name : "?");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3;
  unsigned long long kernel_us = 1000;
  unsigned long long alloc_mib = 0;
  int depth = 0;                  // kernels per batch; 0: about 4 ms of work
  bool churn = false;             // also allocate and free small blocks as fast as possible, on a second thread
  bool show_memory = false;       // say what cuMemGetInfo reports (on standard error), before allocating
  int requests = 0;               // >0: a server answering requests instead of a busy loop (see usage)
  std::string launch = "kernel";  // how each kernel goes: cuLaunchKernel, cooperative, or a graph of it
  unsigned long long gap_us = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (k == "--kernel-us")
      kernel_us = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--alloc-mib")
      alloc_mib = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--depth")
      depth = std::atoi(argv[i + 1]);
    else if (k == "--churn")
      churn = std::atoi(argv[i + 1]) != 0;
    else if (k == "--show-memory")
      show_memory = std::atoi(argv[i + 1]) != 0;
    else if (k == "--requests")
      requests = std::atoi(argv[i + 1]);
    else if (k == "--gap-us")
      gap_us = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--launch" &&
             (std::strcmp(argv[i + 1], "kernel") == 0 || std::strcmp(argv[i + 1], "cooperative") == 0 ||
              std::strcmp(argv[i + 1], "graph") == 0))
      launch = argv[i + 1];
    else {
      std::fprintf(
          stderr,
          "usage: simgpu-load [--seconds S] [--kernel-us N] [--alloc-mib M] [--depth D] [--churn 0|1]\n"
          "                   [--show-memory 0|1] [--requests R [--gap-us G]] [--launch kernel|cooperative|graph]\n"
          "  keeps device 0 busy with spin kernels of N us (default 1000) for S seconds (default 3),\n"
          "  after allocating M MiB (default 0); D kernels per batch (default: about 4 ms of work);\n"
          "  --churn 1 also allocates and frees 4 KiB blocks without pause on a second thread;\n"
          "  --show-memory 1 prints what cuMemGetInfo reports, on standard error, before allocating;\n"
          "  --requests R: instead, R requests of one kernel each, waited for, G us apart (default\n"
          "  2000); prints each latency's percentiles: \"latency_us p50 P p99 P max M\"\n"
          "  --launch: each kernel by cuLaunchKernel (default), cuLaunchCooperativeKernel, or as a graph of\n"
          "  one kernel node (captured once, then cuGraphLaunch)\n");
      return 2;
    }
  }
  CUresult r;
  if ((r = cuInit(0))) return fail("cuInit", r);
  CUcontext ctx;
  if ((r = cuDevicePrimaryCtxRetain(&ctx, 0))) return fail("cuDevicePrimaryCtxRetain", r);
  if ((r = cuCtxSetCurrent(ctx))) return fail("cuCtxSetCurrent", r);
  if (show_memory) {
    size_t free_bytes = 0, total_bytes = 0;
    if ((r = cuMemGetInfo(&free_bytes, &total_bytes))) return fail("cuMemGetInfo", r);
    std::fprintf(stderr, "cuMemGetInfo: total %.1f GiB, free %.1f GiB\n", total_bytes / 1073741824.0,
                 free_bytes / 1073741824.0);
  }
  if (alloc_mib) {
    CUdeviceptr p;
    if ((r = cuMemAlloc(&p, alloc_mib << 20))) return fail("cuMemAlloc", r);
  }
  if (churn) {
    // Spends most of its time inside the driver's memory bookkeeping, so that a kill lands there.
    std::thread([ctx] {
      cuCtxSetCurrent(ctx);
      for (;;) {
        CUdeviceptr p;
        if (cuMemAlloc(&p, 4096) == CUDA_SUCCESS) cuMemFree(p);
      }
    }).detach();
  }
  CUmodule mod;
  CUfunction spin;
  if ((r = cuModuleLoadData(&mod, kSpinPtx))) return fail("cuModuleLoadData", r);
  if ((r = cuModuleGetFunction(&spin, mod, "spin"))) return fail("cuModuleGetFunction", r);
  CUstream stream;
  if ((r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING))) return fail("cuStreamCreate", r);
  // Two batches of about 4 ms each in flight: the host refills one while the device runs the other.
  if (depth == 0) depth = static_cast<int>(4000 / (kernel_us ? kernel_us : 1));
  depth = depth < 1 ? 1 : (depth > 4000 ? 4000 : depth);
  if (requests > 0) {
    unsigned long long ns = kernel_us * 1000;
    void* params[] = {&ns};
    std::vector<double> latency_us;
    std::printf("ready\n");
    std::fflush(stdout);
    for (int i = 0; i < requests; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      if ((r = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr))) return fail("cuLaunchKernel", r);
      if ((r = cuStreamSynchronize(stream))) return fail("cuStreamSynchronize", r);
      latency_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      std::this_thread::sleep_for(std::chrono::microseconds(gap_us));
    }
    std::sort(latency_us.begin(), latency_us.end());
    const auto pct = [&](double p) { return latency_us[static_cast<std::size_t>(p * (latency_us.size() - 1))]; };
    std::printf("latency_us p50 %.0f p99 %.0f max %.0f\n", pct(0.5), pct(0.99), latency_us.back());
    return 0;
  }
  CUevent batch_done[2];
  for (CUevent& e : batch_done) cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
  unsigned long long ns = kernel_us * 1000;
  void* params[] = {&ns};
  CUgraphExec graph = nullptr;
  if (launch == "graph") {  // one kernel node, captured once
    CUgraph g = nullptr;
    if ((r = cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_GLOBAL))) return fail("cuStreamBeginCapture", r);
    if ((r = cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr))) return fail("cuLaunchKernel", r);
    if ((r = cuStreamEndCapture(stream, &g))) return fail("cuStreamEndCapture", r);
    if ((r = cuGraphInstantiate(&graph, g, 0))) return fail("cuGraphInstantiate", r);
  }
  const auto submit = [&]() -> CUresult {
    if (graph != nullptr) return cuGraphLaunch(graph, stream);
    if (launch == "cooperative") return cuLaunchCooperativeKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params);
    return cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, stream, params, nullptr);
  };
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  for (unsigned long long batch = 0; std::chrono::steady_clock::now() < end; ++batch) {
    CUevent& done = batch_done[batch % 2];
    if (batch >= 2) cuEventSynchronize(done);  // the batch before the previous one has finished
    for (int k = 0; k < depth; ++k)
      if ((r = submit())) return fail(launch.c_str(), r);
    cuEventRecord(done, stream);
    if (batch == 0) {
      std::printf("ready\n");
      std::fflush(stdout);
    }
  }
  cuStreamSynchronize(stream);
  return 0;
}
