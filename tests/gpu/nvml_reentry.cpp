// NVML as the application calls it, with or without libslice, on a real GPU (tests/gpu/run.sh:
// nvml-reentry, nvml-under-libslice):
//
//   nvml_reentry [--interposer LIB] [--context]
//
// --interposer LIB: loads LIB (nvml_reentry_interposer.cpp) into the global scope before NVML, where
// libslice stands when preloaded, and reports which NVML entry points NVML called through it from
// inside another (nested=inner<outer,...; none: NVML binds its own calls itself), and which reached
// it from another thread than this program's only one (other_threads=...; none).
// --context: first makes a CUDA context (cuInit, cuDevicePrimaryCtxRetain), the moment libslice
// measures a context's memory through NVML; the second device run hung there (issue 22).
// Then, twice, as a monitoring thread does: nvmlInit_v2, a handle, the running processes,
// nvmlShutdown, each timed; and after the last shutdown NVML must answer as to a program that never
// started it: nvmlDeviceGetCount_v2 and one more nvmlShutdown both NVML_ERROR_UNINITIALIZED (1).
// Every call goes through its global name (dlsym RTLD_DEFAULT), as a program linked to NVML makes
// it, so a preloaded libslice sees each. Prints key=value lines; exit 0 when NVML answered so.
// SIGUSR1 prints the main thread's stack (for a run that hangs).
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

double now_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

// SIGUSR1 (tests/gpu/run.sh sends it to a run that hangs): the stack of the thread it lands on, the
// main one, as `object(+0xOFFSET)` lines (addr2line -e object OFFSET names the source, with the
// unstripped build of the same commit). There is no debugger on the device machines.
void dump_stack(int) {
  static const char kHead[] = "stack (SIGUSR1):\n";
  (void)!write(2, kHead, sizeof kHead - 1);
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
}

template <typename Fn>
Fn global(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

int main(int argc, char** argv) {
  const char* interposer = nullptr;
  bool context = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--interposer") == 0 && i + 1 < argc) {
      interposer = argv[++i];
    } else if (std::strcmp(argv[i], "--context") == 0) {
      context = true;
    } else {
      std::fprintf(stderr, "usage: nvml_reentry [--interposer LIB] [--context]\n");
      return 2;
    }
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out as it is made: a hang shows how far it got
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder now, not inside the handler
  struct sigaction on_usr1 {};
  on_usr1.sa_handler = dump_stack;
  sigaction(SIGUSR1, &on_usr1, nullptr);
  void* spy = nullptr;
  if (interposer != nullptr && (spy = dlopen(interposer, RTLD_NOW | RTLD_GLOBAL)) == nullptr) {
    std::printf("error=the interposer does not load: %s\n", dlerror());
    return 1;
  }
  if (dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::printf("error=no NVML: %s\n", dlerror());
    return 1;
  }
  bool ok = true;
  if (context) {
    void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (cuda == nullptr) {
      std::printf("error=no libcuda.so.1: %s\n", dlerror());
      return 1;
    }
    const auto init = global<int (*)(unsigned)>("cuInit");
    const auto get = global<int (*)(int*, int)>("cuDeviceGet");
    const auto retain = global<int (*)(void**, int)>("cuDevicePrimaryCtxRetain");
    const auto release = global<int (*)(int)>("cuDevicePrimaryCtxRelease_v2");
    int device = 0;
    void* ctx = nullptr;
    const int ri = init(0);
    const int rg = ri == 0 ? get(&device, 0) : -1;
    const double t0 = now_ms();
    const int rr = rg == 0 ? retain(&ctx, device) : -1;
    std::printf("context=cuInit:%d cuDeviceGet:%d cuDevicePrimaryCtxRetain:%d retain_ms=%.1f\n", ri, rg, rr,
                now_ms() - t0);
    ok = ok && rr == 0;
    if (rr == 0 && release != nullptr) release(device);
  }
  const auto init = global<int (*)()>("nvmlInit_v2");
  const auto shutdown = global<int (*)()>("nvmlShutdown");
  const auto handle = global<int (*)(unsigned, void**)>("nvmlDeviceGetHandleByIndex_v2");
  const auto processes = global<int (*)(void*, unsigned*, void*)>("nvmlDeviceGetComputeRunningProcesses_v3");
  const auto count = global<int (*)(unsigned*)>("nvmlDeviceGetCount_v2");
  if (!init || !shutdown || !handle || !processes || !count) {
    std::printf("error=NVML lacks an entry point this program calls\n");
    return 1;
  }
  for (int round = 0; round < 2; ++round) {
    double t = now_ms();
    const int ri = init();
    const double init_ms = now_ms() - t;
    void* device = nullptr;
    const int rh = handle(0, &device);
    unsigned n = 0;
    alignas(8) unsigned char infos[64 * 64];  // room for 64 nvmlProcessInfo_t (40 bytes each)
    n = 64;
    const int rp = processes(device, &n, infos);
    t = now_ms();
    const int rs = shutdown();
    std::printf("round%d=nvmlInit_v2:%d handle:%d processes:%d nvmlShutdown:%d init_ms=%.3f shutdown_ms=%.3f\n", round,
                ri, rh, rp, rs, init_ms, now_ms() - t);
    ok = ok && ri == 0 && rh == 0 && rp == 0 && rs == 0;
  }
  unsigned devices = 0;
  const int rc = count(&devices);
  const int rs = shutdown();
  std::printf("after_last_shutdown=nvmlDeviceGetCount_v2:%d nvmlShutdown:%d\n", rc, rs);
  ok = ok && rc == 1 && rs == 1;  // NVML_ERROR_UNINITIALIZED
  if (spy != nullptr) {
    const auto nested = reinterpret_cast<const char* (*)()>(dlsym(spy, "nvml_reentry_nested"));
    const std::string seen = nested != nullptr ? nested() : "?";
    std::printf("nested=%s\n", seen.empty() ? "none" : seen.c_str());
    const auto other = reinterpret_cast<const char* (*)()>(dlsym(spy, "nvml_reentry_other_threads"));
    const std::string elsewhere = other != nullptr ? other() : "?";
    std::printf("other_threads=%s\n", elsewhere.empty() ? "none" : elsewhere.c_str());
  }
  std::printf("nvml_reentry=%s\n", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
