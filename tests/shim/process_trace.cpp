// What a process can observe of itself, written down at each step of a CUDA program's life, so that
// process_trace_test.py can run it with and without LD_PRELOAD=libslice.so and compare (issue 22:
// libslice lives in other people's processes and must leave no trace there). The program is shaped
// like CPython: it makes pthread keys of its own, and only then loads the driver with dlopen.
//
//   process_trace                  the steps; one line per observation: STEP<TAB>WHAT<TAB>VALUE
//   process_trace --fds            the descriptors it was given (for the exec step)
//   process_trace --nvml-footprint what starting NVML brings into a process (keys, threads,
//                                  descriptors): what libslice's own start of NVML may add
//
// Steps: start, cuInit, context, allocation (64 MiB), refusal (a request past the test's cap,
// PROCESS_TRACE_LARGE_MIB, default 512: it succeeds without libslice), reconciliation (cuMemGetInfo), launch (a kernel,
// synchronised), nvml (the program's own nvmlInit/nvmlShutdown), late (the same calls again more than 2 s into the
// process, when libslice re-reads policies and reconciles on its own schedule), then fork (a child that exits, one that
// calls the driver, and children forked while another thread launches and libslice's watcher looks), exec (what a child
// program inherits) and faults (the program's own SIGSEGV handler).
//
// A test of the test (process_trace_test.py): a preload that defines process_trace_mutant_step and
// process_trace_mutant_wrap is given each step before its snapshot and each driver function the
// program looks up, and does one thing libslice must not do; the comparison must catch it.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <fenv.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;

constexpr unsigned long long kMiB = 1ull << 20;
constexpr unsigned long kTimerSlackNs = 123457;  // the program's own, not the kernel's default
void* const kKeyValue = reinterpret_cast<void*>(0x5eed);

pthread_key_t g_key_unset;  // made before the driver is loaded, never set: must read NULL
pthread_key_t g_key_set;    // made before the driver is loaded, set once: must read kKeyValue
std::vector<char> g_alt_stack(1 << 16);
sigjmp_buf g_fault_return;
volatile sig_atomic_t g_first_handler_runs = 0, g_second_handler_runs = 0;

void first_handler(int, siginfo_t*, void*) {
  g_first_handler_runs = g_first_handler_runs + 1;
  siglongjmp(g_fault_return, 1);
}
void second_handler(int, siginfo_t*, void*) {
  g_second_handler_runs = g_second_handler_runs + 1;
  siglongjmp(g_fault_return, 1);
}

void line(const char* step, const char* what, const std::string& value) {
  std::printf("%s\t%s\t%s\n", step, what, value.c_str());
}

std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%" PRIx64, v);
  return b;
}

// Copies of libc.so.6 mapped from offset 0: one per C library in the process.
std::string libc_copies() {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return "?";
  std::set<std::string> inodes;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, maps) != nullptr) {
    char range[64], perms[8], device[16], path[3000] = "";
    unsigned long long offset = 0, inode = 0;
    if (std::sscanf(buffer, "%63s %7s %llx %15s %llu %2999s", range, perms, &offset, device, &inode, path) < 5)
      continue;
    const std::string p = path;
    if (offset == 0 && p.size() >= 9 && p.substr(p.size() - 9) == "libc.so.6") inodes.insert(range);
  }
  std::fclose(maps);
  return std::to_string(inodes.size());
}

int add_object(dl_phdr_info* info, std::size_t, void* out) {
  const std::string name = info->dlpi_name != nullptr ? info->dlpi_name : "";
  if (!name.empty()) static_cast<std::set<std::string>*>(out)->insert(name.substr(name.rfind('/') + 1));
  return 0;
}

std::string objects() {
  std::set<std::string> names;
  dl_iterate_phdr(add_object, &names);
  std::string all;
  for (const std::string& n : names) all += (all.empty() ? "" : " ") + n;
  return all;
}

std::string next_key() {
  pthread_key_t k;
  if (pthread_key_create(&k, nullptr) != 0) return "?";
  pthread_key_delete(k);
  return std::to_string(k);
}

// Each disposition: default, ignore, or which handler (the program's two by name).
std::string dispositions() {
  std::string all;
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction a {};
    if (sigaction(sig, nullptr, &a) != 0) continue;
    std::string h;
    if ((a.sa_flags & SA_SIGINFO) != 0 && a.sa_sigaction == first_handler) {
      h = "first";
    } else if ((a.sa_flags & SA_SIGINFO) != 0 && a.sa_sigaction == second_handler) {
      h = "second";
    } else if (a.sa_handler == SIG_DFL) {
      continue;  // the usual case: only what differs from it is written
    } else if (a.sa_handler == SIG_IGN) {
      h = "ignore";
    } else {
      Dl_info info{};
      h = dladdr(reinterpret_cast<void*>(a.sa_handler), &info) != 0 && info.dli_fname != nullptr
              ? std::string("handler in ") + info.dli_fname
              : "handler";
    }
    all += std::to_string(sig) + "=" + h + "/" + hex(static_cast<unsigned>(a.sa_flags)) + " ";
  }
  return all;
}

std::string signal_mask() {
  sigset_t mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &mask);
  std::string blocked;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sigismember(&mask, sig) == 1) blocked += std::to_string(sig) + " ";
  return blocked;
}

std::string alt_stack() {
  stack_t s{};
  sigaltstack(nullptr, &s);
  return s.ss_sp == g_alt_stack.data() && s.ss_size == g_alt_stack.size()
             ? "the program's"
             : hex(reinterpret_cast<std::uintptr_t>(s.ss_sp));
}

std::string float_environment() {
  return "round=" + std::to_string(fegetround()) +
         " except=" + hex(static_cast<unsigned>(fetestexcept(FE_ALL_EXCEPT))) + " mxcsr=" + hex(_mm_getcsr());
}

// Descriptors: what each open one names (the targets, sorted), or those a program started from here
// would inherit (not close-on-exec), with their numbers.
std::string descriptors(bool inherited_only) {
  std::vector<std::string> found;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      const int fd = std::atoi(e->d_name);
      if (fd == dirfd(d) || fd <= STDERR_FILENO) continue;  // the standard three are the caller's
      const int flags = fcntl(fd, F_GETFD);
      if (inherited_only && (flags < 0 || (flags & FD_CLOEXEC) != 0)) continue;
      char target[512] = "";
      const std::string link = "/proc/self/fd/" + std::to_string(fd);
      const ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
      if (n > 0) target[n] = '\0';
      found.push_back(std::to_string(fd) + ":" + target);
    }
    closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::string all;
  for (const std::string& f : found) all += (inherited_only ? f : f.substr(f.find(':') + 1)) + " ";
  return all;
}

std::string threads_once() {
  std::vector<std::string> names;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      char name[64] = "";
      const std::string path = std::string("/proc/self/task/") + e->d_name + "/comm";
      if (FILE* f = std::fopen(path.c_str(), "re")) {
        if (std::fgets(name, sizeof name, f) == nullptr) name[0] = '\0';
        std::fclose(f);
      }
      name[std::strcspn(name, "\n")] = '\0';
      names.push_back(name);
    }
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::string all = std::to_string(names.size()) + ":";
  for (const std::string& n : names) all += " " + n;
  return all;
}

// The threads once they stopped changing (a thread names itself after it starts: two looks 20 ms
// apart that agree, within a second).
std::string threads() {
  std::string last = threads_once();
  for (int i = 0; i < 50; ++i) {
    usleep(20000);
    const std::string now = threads_once();
    if (now == last) return now;
    last = now;
  }
  return last;
}

std::string environment() {
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) names.emplace_back(*e, std::strcspn(*e, "="));
  std::sort(names.begin(), names.end());
  std::string all;
  for (const std::string& n : names) all += n + " ";
  return all;
}

// A mutant preload's hooks (a test of the test), when one is loaded.
using MutantStep = void (*)(const char*);
using MutantWrap = void* (*)(const char*, void*);

void snapshot(const char* step) {
  if (const auto mutant = reinterpret_cast<MutantStep>(dlsym(RTLD_DEFAULT, "process_trace_mutant_step"))) mutant(step);
  line(step, "libc copies", libc_copies());
  line(step, "objects", objects());
  line(step, "key made first, never set", hex(reinterpret_cast<std::uintptr_t>(pthread_getspecific(g_key_unset))));
  line(step, "key made first, set", hex(reinterpret_cast<std::uintptr_t>(pthread_getspecific(g_key_set))));
  line(step, "next key", next_key());
  line(step, "dispositions", dispositions());
  line(step, "signal mask", signal_mask());
  line(step, "alternate stack", alt_stack());
  line(step, "floating point", float_environment());
  line(step, "timer slack", std::to_string(prctl(PR_GET_TIMERSLACK, 0ul, 0ul, 0ul, 0ul)));
  line(step, "descriptors", descriptors(false));
  line(step, "inheritable descriptors", descriptors(true));
  line(step, "threads", threads());
  line(step, "environment", environment());
}

struct Driver {
  void* lib = nullptr;
  template <typename Fn>
  Fn get(const char* name) {
    void* fn = dlsym(lib, name);
    if (const auto wrap = reinterpret_cast<MutantWrap>(dlsym(RTLD_DEFAULT, "process_trace_mutant_wrap")))
      fn = wrap(name, fn);
    return reinterpret_cast<Fn>(fn);
  }
};

// A driver call with errno set to a value of the program's before it: what errno is after.
template <typename Call>
CUresult call(const char* step, const char* what, Call&& c) {
  errno = 4242;
  const CUresult rc = c();
  const int after = errno;
  line(step, (std::string("errno after ") + what).c_str(), std::to_string(after));
  line(step, (std::string("result of ") + what).c_str(), std::to_string(rc));
  return rc;
}

// The child's status: exit code, or the signal; "hung" past 10 s.
std::string wait_for(pid_t pid) {
  for (int i = 0; i < 1000; ++i) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
      if (WIFSIGNALED(status)) return "signal " + std::to_string(WTERMSIG(status));
      return "?";
    }
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return "hung";
}

int fault() {
  volatile int* nowhere = nullptr;
  return *nowhere;
}

// What NVML's start brings: the keys, threads and descriptors it adds (NVML held started).
int nvml_footprint() {
  const std::string keys_before = next_key(), threads_before = threads(), fds_before = descriptors(false);
  Driver nvml{dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)};
  const auto init = nvml.lib != nullptr ? nvml.get<int (*)()>("nvmlInit_v2") : nullptr;
  if (init == nullptr || init() != 0) return std::fprintf(stderr, "process_trace: NVML did not start\n"), 2;
  line("footprint", "keys", std::to_string(std::atoi(next_key().c_str()) - std::atoi(keys_before.c_str())));
  line("footprint", "threads before", threads_before);
  line("footprint", "threads", threads());
  line("footprint", "descriptors before", fds_before);
  line("footprint", "descriptors", descriptors(false));
  return 0;
}

// Children forked while another thread launches kernels (and libslice's watcher looks at them): each
// calls NVML and the driver, and exits. How many exited cleanly, of how many.
std::string fork_while_busy(CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                               unsigned, CUstream, void**, void**),
                            CUresult (*sync)(CUstream), CUresult (*set_current)(CUcontext), CUcontext ctx,
                            CUfunction kernel, CUresult (*alloc)(CUdeviceptr*, std::size_t), void* nvml_lib) {
  std::atomic<bool> stop{false};
  std::thread launcher([&] {
    set_current(ctx);
    while (!stop.load()) {
      for (int i = 0; i < 8; ++i) launch(kernel, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
      sync(nullptr);
    }
  });
  using NvmlCall = int (*)();
  const auto init = nvml_lib != nullptr ? reinterpret_cast<NvmlCall>(dlsym(nvml_lib, "nvmlInit_v2")) : nullptr;
  const auto shutdown = nvml_lib != nullptr ? reinterpret_cast<NvmlCall>(dlsym(nvml_lib, "nvmlShutdown")) : nullptr;
  constexpr int kChildren = 100;
  int clean = 0;
  std::string odd;
  for (int i = 0; i < kChildren; ++i) {
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) {
      if (init != nullptr && init() == 0) shutdown();
      CUdeviceptr p = 0;
      alloc(&p, kMiB);  // the driver's own answer for a forked child
      std::_Exit(0);
    }
    const std::string status = child > 0 ? wait_for(child) : "fork failed";
    if (status == "exit 0")
      ++clean;
    else if (odd.empty())
      odd = " (first other: " + status + ")";
  }
  stop = true;
  launcher.join();
  return std::to_string(clean) + " of " + std::to_string(kChildren) + " exited cleanly" + odd;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--fds") == 0) {
    line("exec", "inherited descriptors", descriptors(true));
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "--nvml-footprint") == 0) return nvml_footprint();
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  // The program's own state, set before any CUDA: keys, a SIGSEGV handler on an alternate stack, a
  // rounding mode, a timer slack.
  pthread_key_create(&g_key_unset, nullptr);
  pthread_key_create(&g_key_set, nullptr);
  pthread_setspecific(g_key_set, kKeyValue);
  stack_t stack{};
  stack.ss_sp = g_alt_stack.data();
  stack.ss_size = g_alt_stack.size();
  sigaltstack(&stack, nullptr);
  struct sigaction first {};
  first.sa_sigaction = first_handler;
  first.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigaction(SIGSEGV, &first, nullptr);
  fesetround(FE_UPWARD);
  prctl(PR_SET_TIMERSLACK, kTimerSlackNs, 0ul, 0ul, 0ul);
  snapshot("start");

  Driver cu{dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL)};
  if (cu.lib == nullptr) return std::fprintf(stderr, "process_trace: no libcuda.so.1\n"), 2;
  const auto cuInit = cu.get<CUresult (*)(unsigned)>("cuInit");
  const auto cuDeviceGet = cu.get<CUresult (*)(CUdevice*, int)>("cuDeviceGet");
  const auto cuDevicePrimaryCtxRetain = cu.get<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
  const auto cuCtxSetCurrent = cu.get<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
  const auto cuCtxGetCurrent = cu.get<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  const auto cuMemAlloc = cu.get<CUresult (*)(CUdeviceptr*, std::size_t)>("cuMemAlloc_v2");
  const auto cuMemFree = cu.get<CUresult (*)(CUdeviceptr)>("cuMemFree_v2");
  const auto cuMemGetInfo = cu.get<CUresult (*)(std::size_t*, std::size_t*)>("cuMemGetInfo_v2");
  const auto cuModuleLoadData = cu.get<CUresult (*)(CUmodule*, const void*)>("cuModuleLoadData");
  const auto cuModuleGetFunction = cu.get<CUresult (*)(CUfunction*, CUmodule, const char*)>("cuModuleGetFunction");
  const auto cuLaunchKernel = cu.get<CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                                  unsigned, unsigned, CUstream, void**, void**)>("cuLaunchKernel");
  const auto cuStreamSynchronize = cu.get<CUresult (*)(CUstream)>("cuStreamSynchronize");

  call("cuInit", "cuInit", [&] { return cuInit(0); });
  snapshot("cuInit");

  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  call("context", "cuDeviceGet", [&] { return cuDeviceGet(&dev, 0); });
  call("context", "cuDevicePrimaryCtxRetain", [&] { return cuDevicePrimaryCtxRetain(&ctx, dev); });
  call("context", "cuCtxSetCurrent", [&] { return cuCtxSetCurrent(ctx); });
  snapshot("context");

  CUdeviceptr small = 0, large = 0;
  call("allocation", "cuMemAlloc_v2", [&] { return cuMemAlloc(&small, 64 * kMiB); });
  snapshot("allocation");

  // Past the test's cap (SLICE_MEMORY_LIMIT): refused under libslice, granted without it.
  const char* large_mib = std::getenv("PROCESS_TRACE_LARGE_MIB");
  const unsigned long long large_bytes = (large_mib != nullptr ? std::strtoull(large_mib, nullptr, 10) : 512) * kMiB;
  call("refusal", "cuMemAlloc_v2", [&] { return cuMemAlloc(&large, large_bytes); });
  snapshot("refusal");
  if (large != 0) cuMemFree(large);

  std::size_t free_bytes = 0, total = 0;
  call("reconciliation", "cuMemGetInfo_v2", [&] { return cuMemGetInfo(&free_bytes, &total); });
  snapshot("reconciliation");

  static const char kPtx[] = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry noop() { ret; }\n";
  CUmodule module = nullptr;
  CUfunction noop = nullptr;
  call("launch", "cuModuleLoadData", [&] { return cuModuleLoadData(&module, kPtx); });
  call("launch", "cuModuleGetFunction", [&] { return cuModuleGetFunction(&noop, module, "noop"); });
  call("launch", "cuLaunchKernel",
       [&] { return cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr); });
  call("launch", "cuStreamSynchronize", [&] { return cuStreamSynchronize(nullptr); });
  snapshot("launch");

  Driver nvml{dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)};
  if (nvml.lib != nullptr) {
    const auto init = nvml.get<int (*)()>("nvmlInit_v2");
    const auto count = nvml.get<int (*)(unsigned*)>("nvmlDeviceGetCount_v2");
    const auto shutdown = nvml.get<int (*)()>("nvmlShutdown");
    unsigned n = 0;
    call("nvml", "nvmlDeviceGetCount_v2 before nvmlInit", [&] { return count(&n); });
    call("nvml", "nvmlInit_v2", [&] { return init(); });
    call("nvml", "nvmlDeviceGetCount_v2", [&] { return count(&n); });
    call("nvml", "nvmlShutdown", [&] { return shutdown(); });
    call("nvml", "nvmlDeviceGetCount_v2 after nvmlShutdown", [&] { return count(&n); });
  }
  snapshot("nvml");

  // More than 2 s into the process: libslice re-reads policies (once a second) and reconciles on its
  // own schedule; the program's errno and everything else must be as without it still.
  const auto cuDeviceTotalMem = cu.get<CUresult (*)(std::size_t*, CUdevice)>("cuDeviceTotalMem_v2");
  usleep(2'100'000);
  CUdeviceptr late = 0, late_large = 0;
  call("late", "cuMemAlloc_v2", [&] { return cuMemAlloc(&late, 16 * kMiB); });
  call("late", "cuMemAlloc_v2 past the cap", [&] { return cuMemAlloc(&late_large, large_bytes); });
  if (late_large != 0) cuMemFree(late_large);
  call("late", "cuMemGetInfo_v2", [&] { return cuMemGetInfo(&free_bytes, &total); });
  std::size_t device_total = 0;
  call("late", "cuDeviceTotalMem_v2", [&] { return cuDeviceTotalMem(&device_total, dev); });
  call("late", "cuLaunchKernel", [&] { return cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr); });
  call("late", "cuStreamSynchronize", [&] { return cuStreamSynchronize(nullptr); });
  call("late", "cuMemFree_v2", [&] { return cuMemFree(late); });
  snapshot("late");

  // A child forked after CUDA use (a DataLoader worker, multiprocessing): one that only exits, and
  // one that calls the driver, which must answer with its own error, not crash or hang.
  std::fflush(stdout);
  pid_t child = fork();
  if (child == 0) std::exit(0);  // atexit handlers run, as in a Python worker
  line("fork", "child that exits", wait_for(child));
  std::fflush(stdout);
  child = fork();
  if (child == 0) {
    CUcontext current = nullptr;
    CUdeviceptr p = 0;
    call("fork", "cuCtxGetCurrent in the child", [&] { return cuCtxGetCurrent(&current); });
    call("fork", "cuMemAlloc_v2 in the child", [&] { return cuMemAlloc(&p, kMiB); });
    std::fflush(stdout);
    std::_Exit(0);
  }
  line("fork", "child that calls the driver", wait_for(child));
  line("fork", "children forked while a thread launches",
       fork_while_busy(cuLaunchKernel, cuStreamSynchronize, cuCtxSetCurrent, ctx, noop, cuMemAlloc, nvml.lib));

  // What a program started from here inherits.
  std::fflush(stdout);
  char* const child_argv[] = {argv[0], const_cast<char*>("--fds"), nullptr};
  if (posix_spawn(&child, argv[0], nullptr, nullptr, child_argv, environ) == 0) {
    line("exec", "child", wait_for(child));
  }

  // The program's own SIGSEGV handler takes its own faults: the one it installed before CUDA, and
  // one it installs now.
  if (sigsetjmp(g_fault_return, 1) == 0) fault();
  line("faults", "handler installed before CUDA ran", std::to_string(g_first_handler_runs));
  struct sigaction second {};
  second.sa_sigaction = second_handler;
  second.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigaction(SIGSEGV, &second, nullptr);
  if (sigsetjmp(g_fault_return, 1) == 0) fault();
  line("faults", "handler installed after CUDA ran", std::to_string(g_second_handler_runs));
  sigaction(SIGSEGV, &first, nullptr);
  snapshot("end");

  cuMemFree(small);
  return 0;
}
