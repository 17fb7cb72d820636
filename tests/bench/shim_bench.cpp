// What libslice adds to a driver call: one program, run by scripts/bench.sh alternately with and
// without LD_PRELOAD=libslice.so, so that only the difference between the two means anything.
// It is linked against the driver (simgpu_cuda, soname libcuda.so.1), so under LD_PRELOAD its
// calls bind to libslice's exports (check with LD_DEBUG=bindings).
//
//   shim_bench launch       host time of one cuLaunchKernel of an empty kernel (batches on a stream,
//                           synchronised outside the timed region)
//   shim_bench alloc        one cuMemAlloc_v2 + cuMemFree_v2 pair, sizes cycling 4 KiB .. 1 MiB
//   shim_bench crowded      one cuMemFree_v2 (and one cuMemAlloc_v2) of a random one of 10,000 live
//                           allocations, each call timed alone (per loop: mean of the fastest 99%)
//   shim_bench startup [N]  N fresh processes of `shim_bench first-alloc`: fork until the first
//                           allocation returned, and fork until the process is reaped
//   shim_bench first-alloc [FD]  cuInit, primary context, one cuMemAlloc_v2; writes the monotonic
//                           time at which it returned to FD (8 bytes), frees, exits
//   shim_bench idle [SECONDS]  a tenant that is present but idle: one empty kernel (so that, under
//                           libslice, it is on the GPU's compute board), then prints "ready" and
//                           sleeps for SECONDS (default 7) or until killed; times nothing
//
// Every timed sample (one loop) is printed as one line `name value_ns`; lines starting with '#' are
// remarks. ROUNDS is the number of loops (default 7), after one loop to warm up.
// Any failed call prints a message and exits non-zero.
#include <cuda.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

// An empty kernel: the simulator gives a kernel whose name does not contain "spin" 10 us of device
// time, which the host does not wait for until it synchronises.
const char kPtx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry noop() { ret; }\n";

const char* g_mode = "?";

[[noreturn]] void fail_call(const char* what, CUresult r) {
  const char* name = nullptr;
  if (cuGetErrorName(r, &name) != CUDA_SUCCESS || name == nullptr) name = "unknown error";
  std::fprintf(stderr, "shim_bench %s: %s failed: %s (%d)\n", g_mode, what, name, static_cast<int>(r));
  std::exit(1);
}

#define CHECK(call)                               \
  do {                                            \
    const CUresult r_ = (call);                   \
    if (r_ != CUDA_SUCCESS) fail_call(#call, r_); \
  } while (0)

[[noreturn]] void fail_sys(const char* what) {
  std::fprintf(stderr, "shim_bench %s: %s: %s\n", g_mode, what, std::strerror(errno));
  std::exit(1);
}

std::int64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void emit(const char* name, double ns) { std::printf("%s %.1f\n", name, ns); }

// The cost of reading the clock twice, subtracted from figures of calls timed one by one.
double clock_overhead_ns() {
  std::vector<std::int64_t> v;
  for (int i = 0; i < 2001; ++i) {
    const std::int64_t t0 = now_ns();
    v.push_back(now_ns() - t0);
  }
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return double(v[v.size() / 2]);
}

CUcontext make_context() {
  CHECK(cuInit(0));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  return ctx;
}

void drop_context(CUcontext) {
  CHECK(cuCtxSetCurrent(nullptr));
  CUdevice dev;
  CHECK(cuDeviceGet(&dev, 0));
  CHECK(cuDevicePrimaryCtxRelease(dev));
}

int mode_launch(int rounds) {
  CUcontext ctx = make_context();
  CUmodule mod;
  CUfunction noop;
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&noop, mod, "noop"));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  // 1000 launches are 10 ms of device time: the queue only grows while the batch is timed.
  const int batch = 1000;
  for (int r = -1; r < rounds; ++r) {  // round -1 warms up
    const std::int64_t t0 = now_ns();
    for (int i = 0; i < batch; ++i) CHECK(cuLaunchKernel(noop, 1, 1, 1, 32, 1, 1, 0, stream, nullptr, nullptr));
    const std::int64_t t1 = now_ns();
    CHECK(cuStreamSynchronize(stream));
    if (r >= 0) emit("launch", double(t1 - t0) / batch);
  }
  CHECK(cuStreamDestroy(stream));
  CHECK(cuModuleUnload(mod));
  drop_context(ctx);
  return 0;
}

int mode_alloc(int rounds) {
  CUcontext ctx = make_context();
  const std::size_t sizes[] = {4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20};
  const int pairs = 1000;  // 1 ms or less: the median of many short loops leaves preempted ones out
  for (int r = -1; r < rounds; ++r) {
    const std::int64_t t0 = now_ns();
    for (int i = 0; i < pairs; ++i) {
      CUdeviceptr p;
      CHECK(cuMemAlloc(&p, sizes[i % 5]));
      CHECK(cuMemFree(p));
    }
    if (r >= 0) emit("alloc_free", double(now_ns() - t0) / pairs);
  }
  drop_context(ctx);
  return 0;
}

// The mean of the fastest 99%: a call timed alone that the scheduler preempted takes milliseconds,
// which would swamp a loop's mean; a slow path taken by more than 1% of the calls still counts.
double trimmed_mean(std::vector<std::int64_t>& v) {
  std::sort(v.begin(), v.end());
  const std::size_t keep = v.size() - v.size() / 100;
  double sum = 0;
  for (std::size_t i = 0; i < keep; ++i) sum += double(v[i]);
  return sum / double(keep);
}

int mode_crowded(int rounds) {
  CUcontext ctx = make_context();
  const int live = 10000, per_round = 2000;
  const std::size_t sizes[] = {4 << 10, 16 << 10, 64 << 10};
  std::vector<CUdeviceptr> ptr(live);
  for (int i = 0; i < live; ++i) CHECK(cuMemAlloc(&ptr[i], sizes[i % 3]));
  std::mt19937 rng(12345);  // the same work with and without libslice
  std::uniform_int_distribution<int> pick(0, live - 1);
  const double overhead = clock_overhead_ns();
  std::printf("# clock overhead %.1f ns, subtracted\n", overhead);
  std::vector<std::int64_t> frees(per_round), allocs(per_round);
  for (int r = -1; r < rounds; ++r) {
    for (int i = 0; i < per_round; ++i) {
      const int k = pick(rng);
      const std::int64_t t0 = now_ns();
      const CUresult fr = cuMemFree(ptr[k]);
      const std::int64_t t1 = now_ns();
      if (fr != CUDA_SUCCESS) fail_call("cuMemFree(ptr[k])", fr);
      const CUresult ar = cuMemAlloc(&ptr[k], sizes[k % 3]);
      const std::int64_t t2 = now_ns();
      if (ar != CUDA_SUCCESS) fail_call("cuMemAlloc(&ptr[k], size)", ar);
      frees[i] = t1 - t0;
      allocs[i] = t2 - t1;
    }
    if (r >= 0) {
      emit("free_10k_live", trimmed_mean(frees) - overhead);
      emit("alloc_10k_live", trimmed_mean(allocs) - overhead);
    }
  }
  for (CUdeviceptr p : ptr) CHECK(cuMemFree(p));
  drop_context(ctx);
  return 0;
}

int mode_first_alloc(int fd) {
  CUcontext ctx = make_context();
  CUdeviceptr p;
  CHECK(cuMemAlloc(&p, 1 << 20));
  const std::int64_t t = now_ns();
  if (fd >= 0) {
    if (write(fd, &t, sizeof t) != static_cast<ssize_t>(sizeof t)) fail_sys("write to the parent");
    close(fd);
  }
  CHECK(cuMemFree(p));
  drop_context(ctx);
  return 0;
}

int mode_startup(int children) {
  for (int c = 0; c < children; ++c) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) fail_sys("pipe2");
    const std::string fd_arg = std::to_string(fds[1]);
    const std::int64_t t0 = now_ns();
    const pid_t pid = fork();
    if (pid < 0) fail_sys("fork");
    if (pid == 0) {
      fcntl(fds[1], F_SETFD, 0);  // the child's write end survives exec
      char mode[] = "first-alloc";
      char* argv[] = {const_cast<char*>("shim_bench"), mode, const_cast<char*>(fd_arg.c_str()), nullptr};
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    close(fds[1]);
    std::int64_t t_alloc = 0;
    ssize_t got;
    do got = read(fds[0], &t_alloc, sizeof t_alloc);
    while (got < 0 && errno == EINTR);
    close(fds[0]);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0)
      if (errno != EINTR) fail_sys("waitpid");
    const std::int64_t t_end = now_ns();
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || got != static_cast<ssize_t>(sizeof t_alloc)) {
      if (WIFSIGNALED(status))
        std::fprintf(stderr, "shim_bench startup: the first-alloc child died of signal %d\n", WTERMSIG(status));
      else
        std::fprintf(stderr, "shim_bench startup: the first-alloc child failed (exit status %d)\n",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      return 1;
    }
    emit("startup_first_alloc", double(t_alloc - t0));
    emit("startup_process", double(t_end - t0));
  }
  return 0;
}

int mode_idle(int seconds) {
  CUcontext ctx = make_context();
  CUmodule mod;
  CUfunction noop;
  CHECK(cuModuleLoadData(&mod, kPtx));
  CHECK(cuModuleGetFunction(&noop, mod, "noop"));
  CHECK(cuLaunchKernel(noop, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr));
  CHECK(cuCtxSynchronize());
  std::printf("ready\n");
  std::fflush(stdout);
  const std::int64_t end = now_ns() + std::int64_t(seconds) * 1000000000;
  for (std::int64_t t = now_ns(); t < end; t = now_ns()) {
    const std::int64_t left = end - t;
    timespec ts{time_t(left / 1000000000), long(left % 1000000000)};
    nanosleep(&ts, nullptr);
  }
  CHECK(cuModuleUnload(mod));
  drop_context(ctx);
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: shim_bench launch|alloc|crowded [ROUNDS]\n"
               "       shim_bench idle [SECONDS]\n"
               "       shim_bench startup [CHILDREN]\n"
               "       shim_bench first-alloc [FD]\n");
  return 2;
}

int number(const char* s, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return -1;
  return static_cast<int>(v);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) return usage();
  const std::string mode = argv[1];
  g_mode = argv[1];
  const bool child = mode == "first-alloc";
  const int arg = argc == 3 ? number(argv[2], child ? 0 : 1, child ? 1 << 20 : 1000) : (child ? -1 : 7);
  if (argc == 3 && arg < 0) return usage();
  // A hung driver ends the benchmark instead of holding the script.
  alarm(child ? 30 : mode == "idle" ? static_cast<unsigned>(arg) + 30 : 120);
  if (mode == "launch") return mode_launch(arg);
  if (mode == "alloc") return mode_alloc(arg);
  if (mode == "crowded") return mode_crowded(arg);
  if (mode == "startup") return mode_startup(arg);
  if (mode == "first-alloc") return mode_first_alloc(arg);
  if (mode == "idle") return mode_idle(arg);
  return usage();
}
