// Stream capture under libslice on a real GPU, as vLLM's start-up does it: work is already queued
// (so libslice's watcher has streams to look after), a busy neighbour tenant shares the GPU and a
// compute share is set, and three threads capture 100 launches between them, in the global mode,
// while the watcher runs. On the real driver a query of a capturing stream invalidates the capture:
// every cudaStreamEndCapture must succeed, and each graph, replayed, must have run every launch.
// Usage: capture_threads (under LD_PRELOAD=libslice.so; prints key=value lines, PASS or FAIL)
#include <cuda_runtime.h>

#include <atomic>
#include <barrier>
#include <cstdio>
#include <thread>
#include <vector>

namespace {

__global__ void count(unsigned long long* counter, unsigned long long spin_ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < spin_ns);
  atomicAdd(counter, 1ull);
}

}  // namespace

int main() {
  constexpr int kThreads = 3, kReplays = 10;
  const int launches[kThreads] = {34, 33, 33};
  std::atomic<int> captured{0}, replayed_ok{0};
  std::barrier all_captured(kThreads);
  auto worker = [&](int t) {
    cudaSetDevice(0);
    cudaStream_t s;
    unsigned long long* counter = nullptr;
    const bool ready = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess &&
                       cudaMalloc(&counter, sizeof *counter) == cudaSuccess;
    if (ready) {
      for (int i = 0; i < 20; ++i) count<<<1, 1, 0, s>>>(counter, 500000);  // queued when the capture begins
    }
    cudaGraph_t g = nullptr;
    cudaError_t ended = cudaErrorUnknown;
    if (ready && cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess) {
      for (int i = 0; i < launches[t]; ++i) count<<<1, 1, 0, s>>>(counter, 20000);
      ended = cudaStreamEndCapture(s, &g);
    }
    std::printf("thread%d_end_capture=%s\n", t, cudaGetErrorName(ended));
    if (ended == cudaSuccess) ++captured;
    all_captured.arrive_and_wait();  // nobody synchronises while another thread captures globally
    cudaGraphExec_t exec = nullptr;
    if (ended != cudaSuccess || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) return;
    cudaStreamSynchronize(s);
    cudaMemset(counter, 0, sizeof *counter);
    for (int r = 0; r < kReplays; ++r) cudaGraphLaunch(exec, s);
    unsigned long long ran = 0;
    if (cudaStreamSynchronize(s) == cudaSuccess && cudaMemcpy(&ran, counter, sizeof ran, cudaMemcpyDeviceToHost) == cudaSuccess &&
        ran == static_cast<unsigned long long>(launches[t]) * kReplays)
      ++replayed_ok;
    std::printf("thread%d_replayed_kernels=%llu\n", t, ran);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  std::printf("captures_ok=%d\nreplays_ok=%d\n%s\n", captured.load(), replayed_ok.load(),
              captured == kThreads && replayed_ok == kThreads ? "PASS" : "FAIL");
  return captured == kThreads && replayed_ok == kThreads ? 0 : 1;
}
