// Stream capture under libslice on a real GPU, as vLLM's start-up does it: work is already queued
// (so libslice's watcher has streams to look after), a busy neighbour tenant shares the GPU and a
// compute share is set, and three threads capture 100 launches between them, in the global mode,
// while the watcher runs. On the real driver a query of a capturing stream invalidates the capture:
// every cudaStreamBeginCapture and cudaStreamEndCapture must succeed, and each graph, replayed, must
// have run every launch.
// The threads make their streams and memory, and queue work, before any of them begins capturing:
// in the global mode, cudaStreamCreate or cudaMalloc in one thread while another captures is itself
// illegal (cudaErrorStreamCaptureUnsupported), which would fail this check for the program's sake,
// not libslice's. Likewise nothing synchronises until every capture has ended, and the counter is
// reset on the capture's own stream.
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
  constexpr int kThreads = 3, kReplays = 10, kQueued = 100;
  const int launches[kThreads] = {34, 33, 33};
  std::atomic<int> captured{0}, replayed_ok{0};
  std::barrier set_up(kThreads), all_captured(kThreads);
  auto worker = [&](int t) {
    cudaSetDevice(0);
    cudaStream_t s = nullptr;
    unsigned long long* counter = nullptr;
    const cudaError_t made = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    const cudaError_t allocated = made == cudaSuccess ? cudaMalloc(&counter, sizeof *counter) : made;
    const bool ready = made == cudaSuccess && allocated == cudaSuccess;
    if (!ready) std::printf("thread%d_setup=%s\n", t, cudaGetErrorName(made != cudaSuccess ? made : allocated));
    if (ready) {
      for (int i = 0; i < kQueued; ++i) count<<<1, 1, 0, s>>>(counter, 1000000);  // 100 ms queued at the capture
    }
    set_up.arrive_and_wait();  // no stream or allocation is made while another thread captures globally
    cudaGraph_t g = nullptr;
    const cudaError_t began = ready ? cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) : cudaErrorNotReady;
    cudaError_t ended = began;
    if (began == cudaSuccess) {
      for (int i = 0; i < launches[t]; ++i) count<<<1, 1, 0, s>>>(counter, 20000);
      ended = cudaStreamEndCapture(s, &g);
    }
    std::printf("thread%d_begin_capture=%s\nthread%d_end_capture=%s\n", t, cudaGetErrorName(began), t,
                cudaGetErrorName(ended));
    if (began == cudaSuccess && ended == cudaSuccess) ++captured;
    all_captured.arrive_and_wait();  // nobody synchronises while another thread captures globally
    cudaGraphExec_t exec = nullptr;
    if (began != cudaSuccess || ended != cudaSuccess) return;
    if (const cudaError_t e = cudaGraphInstantiate(&exec, g, 0)) {
      std::printf("thread%d_instantiate=%s\n", t, cudaGetErrorName(e));
      return;
    }
    unsigned long long ran = 0;
    cudaError_t replay = cudaMemsetAsync(counter, 0, sizeof *counter, s);  // after the queued kernels
    for (int r = 0; r < kReplays && replay == cudaSuccess; ++r) replay = cudaGraphLaunch(exec, s);
    if (replay == cudaSuccess) replay = cudaMemcpyAsync(&ran, counter, sizeof ran, cudaMemcpyDeviceToHost, s);
    if (replay == cudaSuccess) replay = cudaStreamSynchronize(s);
    if (replay == cudaSuccess && ran == static_cast<unsigned long long>(launches[t]) * kReplays) ++replayed_ok;
    std::printf("thread%d_replay=%s\nthread%d_replayed_kernels=%llu (of %d)\n", t, cudaGetErrorName(replay), t, ran,
                launches[t] * kReplays);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(g);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (std::thread& t : threads) t.join();
  const bool ok = captured == kThreads && replayed_ok == kThreads;
  std::printf("captures_ok=%d\nreplays_ok=%d\n%s\n", captured.load(), replayed_ok.load(), ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
