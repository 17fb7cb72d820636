// Device time on a real GPU, for tests/gpu/run.sh: kernels that each run a set time, timed by the
// GPU's own %globaltimer (nanoseconds, the same on every multiprocessor and at any clock: clock64
// counts cycles per multiprocessor, and an idle H200 runs at a fraction of its peak clock).
//   spin_share busy KERNEL_US START_NS SECONDS [graph]
//       keeps the GPU busy from START_NS (CLOCK_REALTIME, so that two processes measure the same
//       window) for SECONDS, plainly or as CUDA graphs of ten kernels, and prints the kernels that
//       finished inside the window (device time = kernels x KERNEL_US) and this process's CPU time
//   spin_share serve KERNEL_US REQUESTS GAP_US
//       a server: REQUESTS requests of one kernel each, waited for, GAP_US apart; prints the
//       latencies' percentiles
// Output: key=value lines.
#include <cuda_runtime.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
}

unsigned long long realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<unsigned long long>(ts.tv_sec) * 1000000000ull + static_cast<unsigned long long>(ts.tv_nsec);
}

void print_cpu() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  std::printf("cpu_user_s=%.3f\ncpu_sys_s=%.3f\n", u.ru_utime.tv_sec + u.ru_utime.tv_usec / 1e6,
              u.ru_stime.tv_sec + u.ru_stime.tv_usec / 1e6);
}

int busy(double kernel_us, unsigned long long start_ns, double seconds, bool graph) {
  const auto ns = static_cast<unsigned long long>(kernel_us * 1000);
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return std::puts("error=stream"), 1;
  spin<<<1, 1, 0, s>>>(1000);  // load the module outside the window
  cudaStreamSynchronize(s);
  constexpr int kPerGraph = 10;
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g = nullptr;
    if (cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) != cudaSuccess) return std::puts("error=capture"), 1;
    for (int i = 0; i < kPerGraph; ++i) spin<<<1, 1, 0, s>>>(ns);
    if (cudaStreamEndCapture(s, &g) != cudaSuccess || cudaGraphInstantiate(&exec, g, 0) != cudaSuccess)
      return std::puts("error=graph"), 1;
    cudaGraphDestroy(g);
  }
  while (realtime_ns() < start_ns) std::this_thread::sleep_for(std::chrono::microseconds(200));
  const unsigned long long end_ns = start_ns + static_cast<unsigned long long>(seconds * 1e9);
  // Batches of about 4 ms, each waited for: what finishes by the window's end counts.
  const int per_batch = std::max(1, static_cast<int>(4000 / kernel_us / (graph ? kPerGraph : 1)));
  long long kernels = 0;
  while (realtime_ns() < end_ns) {
    for (int b = 0; b < per_batch; ++b) {
      if (graph) cudaGraphLaunch(exec, s);
      else spin<<<1, 1, 0, s>>>(ns);
    }
    if (cudaStreamSynchronize(s) != cudaSuccess) return std::puts("error=launch"), 1;
    if (realtime_ns() <= end_ns) kernels += per_batch * (graph ? kPerGraph : 1);
  }
  if (cudaGetLastError() != cudaSuccess) return std::puts("error=launch"), 1;
  std::printf("kernels=%lld\ndevice_s=%.4f\nwindow_s=%.3f\n", kernels, kernels * kernel_us / 1e6, seconds);
  print_cpu();
  return 0;
}

int serve(double kernel_us, int requests, double gap_us) {
  const auto ns = static_cast<unsigned long long>(kernel_us * 1000);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  spin<<<1, 1, 0, s>>>(1000);
  cudaStreamSynchronize(s);
  std::vector<double> us;
  for (int r = 0; r < requests; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    spin<<<1, 1, 0, s>>>(ns);
    if (cudaStreamSynchronize(s) != cudaSuccess) return std::puts("error=launch"), 1;
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(gap_us)));
  }
  std::sort(us.begin(), us.end());
  std::printf("p50_us=%.0f\np99_us=%.0f\nmax_us=%.0f\n", us[us.size() / 2], us[us.size() * 99 / 100], us.back());
  print_cpu();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 6 && std::strcmp(argv[1], "busy") == 0)
    return busy(std::atof(argv[2]), std::strtoull(argv[3], nullptr, 10), std::atof(argv[4]),
                argc > 5 && std::strcmp(argv[5], "graph") == 0);
  if (argc == 5 && std::strcmp(argv[1], "serve") == 0) return serve(std::atof(argv[2]), std::atoi(argv[3]), std::atof(argv[4]));
  std::fprintf(stderr, "usage: spin_share busy KERNEL_US START_NS SECONDS [plain|graph] | serve KERNEL_US REQUESTS GAP_US\n");
  return 2;
}
