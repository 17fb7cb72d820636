// Device time on a real GPU, for tests/gpu/run.sh: kernels that each run a set time, timed by the
// GPU's own %globaltimer (nanoseconds, the same on every multiprocessor and at any clock: clock64
// counts cycles per multiprocessor, and an idle H200 runs at a fraction of its peak clock).
//   spin_share [--parse-only] busy KERNEL_US START_NS SECONDS [plain|graph|cooperative]
//       keeps the GPU busy from START_NS (CLOCK_REALTIME, so that two processes measure the same
//       window; 0: as soon as it is ready) for SECONDS, plainly, as CUDA graphs of ten kernels, or
//       by cooperative launches,
//       and prints the kernels that finished inside the window (device time = kernels x KERNEL_US),
//       how late it began measuring (late_ms; more than 50 ms late for a given START_NS is a
//       failure, exit 5) and this process's CPU time
//   spin_share [--parse-only] serve KERNEL_US REQUESTS GAP_US
//       a server: REQUESTS requests of one kernel each, waited for, GAP_US apart; prints the
//       latencies' percentiles
// The arguments are read before any CUDA call. --parse-only prints what was read and exits 0
// (tests/gpu/run.sh --dry-run runs every form it uses). Exit status: 0 done, 1 a CUDA call failed,
// 2 bad arguments, 4 no CUDA device, 5 started late. Output: key=value lines.
#include <cuda_runtime.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kNoDevice = 4, kLate = 5, kUsage = 2;
constexpr double kMaxLateMs = 50;

struct Args {
  bool parse_only = false;
  bool serve = false;
  double kernel_us = 0;
  unsigned long long start_ns = 0;  // busy: 0 = as soon as ready
  double seconds = 0;               // busy
  bool graph = false;               // busy
  bool cooperative = false;         // busy
  int requests = 0;                 // serve
  double gap_us = 0;                // serve
};

bool number(const char* text, double& out) {
  char* end = nullptr;
  out = std::strtod(text, &end);
  return end != text && *end == '\0';
}

bool whole(const char* text, unsigned long long& out) {
  if (*text < '0' || *text > '9') return false;
  char* end = nullptr;
  out = std::strtoull(text, &end, 10);
  return *end == '\0';
}

// Reads argv into `a`; an empty string when it is valid, else what is wrong.
std::string parse(int argc, char** argv, Args& a) {
  int i = 1;
  if (i < argc && std::strcmp(argv[i], "--parse-only") == 0) a.parse_only = true, ++i;
  const int left = argc - i;
  if (left < 1) return "no mode";
  const char* mode = argv[i];
  char** v = argv + i + 1;
  if (std::strcmp(mode, "busy") == 0) {
    if (left != 4 && left != 5) return "busy takes KERNEL_US START_NS SECONDS [plain|graph|cooperative]";
    if (!number(v[0], a.kernel_us) || a.kernel_us <= 0) return std::string("bad KERNEL_US ") + v[0];
    if (!whole(v[1], a.start_ns)) return std::string("bad START_NS ") + v[1];
    if (!number(v[2], a.seconds) || a.seconds <= 0) return std::string("bad SECONDS ") + v[2];
    if (left == 5) {
      if (std::strcmp(v[3], "graph") == 0)
        a.graph = true;
      else if (std::strcmp(v[3], "cooperative") == 0)
        a.cooperative = true;
      else if (std::strcmp(v[3], "plain") != 0)
        return std::string("bad kind ") + v[3] + " (plain, graph or cooperative)";
    }
    return "";
  }
  if (std::strcmp(mode, "serve") == 0) {
    if (left != 4) return "serve takes KERNEL_US REQUESTS GAP_US";
    unsigned long long requests = 0;
    if (!number(v[0], a.kernel_us) || a.kernel_us <= 0) return std::string("bad KERNEL_US ") + v[0];
    if (!whole(v[1], requests) || requests < 1 || requests > 1000000) return std::string("bad REQUESTS ") + v[1];
    if (!number(v[2], a.gap_us) || a.gap_us < 0) return std::string("bad GAP_US ") + v[2];
    a.serve = true;
    a.requests = static_cast<int>(requests);
    return "";
  }
  return std::string("unknown mode ") + mode;
}

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

int cuda_error(const char* what, cudaError_t e) {
  std::printf("error=%s: %s\n", what, cudaGetErrorName(e));
  return 1;
}

int busy(const Args& a) {
  const auto ns = static_cast<unsigned long long>(a.kernel_us * 1000);
  cudaStream_t s;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) return cuda_error("stream", e);
  spin<<<1, 1, 0, s>>>(1000);  // load the module outside the window
  if (cudaError_t e = cudaStreamSynchronize(s)) return cuda_error("first launch", e);
  constexpr int kPerGraph = 10;
  cudaGraphExec_t exec = nullptr;
  if (a.graph) {
    cudaGraph_t g = nullptr;
    if (cudaError_t e = cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal)) return cuda_error("begin capture", e);
    for (int i = 0; i < kPerGraph; ++i) spin<<<1, 1, 0, s>>>(ns);
    if (cudaError_t e = cudaStreamEndCapture(s, &g)) return cuda_error("end capture", e);
    if (cudaError_t e = cudaGraphInstantiate(&exec, g, 0)) return cuda_error("instantiate", e);
    cudaGraphDestroy(g);
  }
  const unsigned long long start_ns = a.start_ns != 0 ? a.start_ns : realtime_ns();
  while (realtime_ns() < start_ns) std::this_thread::sleep_for(std::chrono::microseconds(200));
  const double late_ms = (realtime_ns() - start_ns) / 1e6;
  std::printf("late_ms=%.2f\n", late_ms);
  if (a.start_ns != 0 && late_ms > kMaxLateMs) {
    std::printf("error=late: began measuring %.0f ms after the common start (at most %.0f ms)\n", late_ms, kMaxLateMs);
    return kLate;
  }
  const unsigned long long end_ns = start_ns + static_cast<unsigned long long>(a.seconds * 1e9);
  // Batches of about 4 ms, each waited for: what finishes by the window's end counts.
  const int per_batch = std::max(1, static_cast<int>(4000 / a.kernel_us / (a.graph ? kPerGraph : 1)));
  long long kernels = 0;
  while (realtime_ns() < end_ns) {
    for (int b = 0; b < per_batch; ++b) {
      if (a.graph) {
        if (cudaError_t e = cudaGraphLaunch(exec, s)) return cuda_error("graph launch", e);
      } else if (a.cooperative) {
        unsigned long long kernel_ns = ns;
        void* args[] = {&kernel_ns};
        if (cudaError_t e = cudaLaunchCooperativeKernel(reinterpret_cast<void*>(spin), 1, 1, args, 0, s))
          return cuda_error("cooperative launch", e);
      } else {
        spin<<<1, 1, 0, s>>>(ns);
      }
    }
    if (cudaError_t e = cudaStreamSynchronize(s)) return cuda_error("launch", e);
    if (realtime_ns() <= end_ns) kernels += per_batch * (a.graph ? kPerGraph : 1);
  }
  if (cudaError_t e = cudaGetLastError()) return cuda_error("launch", e);
  std::printf("kernels=%lld\ndevice_s=%.4f\nwindow_s=%.3f\n", kernels, kernels * a.kernel_us / 1e6, a.seconds);
  print_cpu();
  return 0;
}

int serve(const Args& a) {
  const auto ns = static_cast<unsigned long long>(a.kernel_us * 1000);
  cudaStream_t s;
  if (cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)) return cuda_error("stream", e);
  spin<<<1, 1, 0, s>>>(1000);
  if (cudaError_t e = cudaStreamSynchronize(s)) return cuda_error("first launch", e);
  std::vector<double> us;
  for (int r = 0; r < a.requests; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    spin<<<1, 1, 0, s>>>(ns);
    if (cudaError_t e = cudaStreamSynchronize(s)) return cuda_error("launch", e);
    us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long>(a.gap_us)));
  }
  std::sort(us.begin(), us.end());
  std::printf("p50_us=%.0f\np99_us=%.0f\nmax_us=%.0f\n", us[us.size() / 2], us[us.size() * 99 / 100], us.back());
  print_cpu();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  const std::string wrong = parse(argc, argv, a);
  if (!wrong.empty()) {
    std::fprintf(
        stderr,
        "spin_share: %s\nusage: spin_share [--parse-only] busy KERNEL_US START_NS SECONDS [plain|graph|cooperative]\n"
        "       spin_share [--parse-only] serve KERNEL_US REQUESTS GAP_US\n",
        wrong.c_str());
    return kUsage;
  }
  if (a.parse_only) {
    if (a.serve)
      std::printf("mode=serve kernel_us=%g requests=%d gap_us=%g\n", a.kernel_us, a.requests, a.gap_us);
    else
      std::printf("mode=busy kernel_us=%g start=%s seconds=%g kind=%s\n", a.kernel_us,
                  a.start_ns == 0 ? "now" : std::to_string(a.start_ns).c_str(), a.seconds,
                  a.graph         ? "graph"
                  : a.cooperative ? "cooperative"
                                  : "plain");
    return 0;
  }
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices < 1) {
    std::printf("error=no CUDA device (%s, %d devices)\n", cudaGetErrorName(e), devices);
    return kNoDevice;
  }
  return a.serve ? serve(a) : busy(a);
}
