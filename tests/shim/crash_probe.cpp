// A program for crash_handler_test: run under LD_PRELOAD=libslice.so on the simulated driver, it
// faults either inside libslice (cuArrayCreate_v2 with a descriptor pointer that is not null but
// points nowhere: libslice reads the descriptor to compute the charge before the driver sees it)
// or in its own code, with or without a SIGSEGV handler of its own installed before cuInit.
//   crash_probe libslice|libslice-first|app handler|none|recover
// libslice: a kernel is launched first, which starts libslice's watcher thread and with it the
// loading of libunwind (waited for); libslice-first: the fault is the first thing after cuInit,
// before libslice has an unwinder.
// handler: the handler prints "probe: own handler ran" and exits 42. none: no handler.
// recover (app only): the handler jumps back, three times, as a JVM's would; then exit 0.
#include <dlfcn.h>
#include <setjmp.h>
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

sigjmp_buf g_resume;

void exit_42(int) {
  static const char kMarker[] = "probe: own handler ran\n";
  (void)!::write(STDERR_FILENO, kMarker, sizeof kMarker - 1);
  _exit(42);
}

void resume(int, siginfo_t*, void*) { siglongjmp(g_resume, 1); }

// Not null, mapped nowhere; volatile so that the compiler cannot see the fault coming.
void* volatile g_nowhere = reinterpret_cast<void*>(std::uintptr_t{16});

__attribute__((noinline)) void fault_here() { *static_cast<volatile int*>(g_nowhere) = 1; }

// A spin kernel in PTX (the simulator runs it for its parameter's nanoseconds).
const char kSpinPtx[] =
    ".version 8.0\n.target sm_80\n.address_size 64\n"
    ".visible .entry spin(.param .u64 spin_param_0) { ret; }\n";

// Launches one kernel, then waits until libunwind is loaded (by libslice's watcher thread).
bool launch_and_wait_for_unwinder(void* cuda) {
  using Fn = int (*)(...);
  const auto fn = [&](const char* name) { return reinterpret_cast<Fn>(dlsym(cuda, name)); };
  void* ctx = nullptr;
  void* module = nullptr;
  void* function = nullptr;
  unsigned long long ns = 1000;
  void* params[] = {&ns};
  if (fn("cuDevicePrimaryCtxRetain")(&ctx, 0) != 0 || fn("cuCtxSetCurrent")(ctx) != 0 ||
      fn("cuModuleLoadData")(&module, kSpinPtx) != 0 || fn("cuModuleGetFunction")(&function, module, "spin") != 0 ||
      fn("cuLaunchKernel")(function, 1u, 1u, 1u, 1u, 1u, 1u, 0u, nullptr, params, nullptr) != 0 ||
      fn("cuCtxSynchronize")() != 0)
    return false;
  for (int i = 0; i < 500; ++i) {
    if (dlopen("libunwind.so.8", RTLD_NOW | RTLD_NOLOAD) != nullptr) {
      usleep(500'000);  // loaded; libslice runs it once before it uses it
      return true;
    }
    usleep(10'000);
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: crash_probe libslice|libslice-first|app handler|none|recover\n");
    return 2;
  }
  const bool in_libslice = std::strncmp(argv[1], "libslice", 8) == 0;
  const bool launch_first = std::strcmp(argv[1], "libslice") == 0;
  const char* handler = argv[2];
  struct sigaction action {};
  sigemptyset(&action.sa_mask);
  if (std::strcmp(handler, "handler") == 0) {
    action.sa_handler = exit_42;
    sigaction(SIGSEGV, &action, nullptr);
  } else if (std::strcmp(handler, "recover") == 0) {
    action.sa_sigaction = resume;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &action, nullptr);
  }

  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) {
    std::fprintf(stderr, "no simulated driver on LD_LIBRARY_PATH\n");
    return 2;
  }
  auto cu_init = reinterpret_cast<int (*)(unsigned)>(dlsym(cuda, "cuInit"));
  auto array_create = reinterpret_cast<int (*)(void**, const void*)>(dlsym(cuda, "cuArrayCreate_v2"));
  if (cu_init == nullptr || array_create == nullptr || cu_init(0) != 0) {
    std::fprintf(stderr, "cuInit failed\n");
    return 2;
  }
  if (std::strcmp(handler, "recover") == 0) {
    int recovered = 0;
    while (recovered < 3) {
      if (sigsetjmp(g_resume, 1) != 0) {
        ++recovered;
        continue;
      }
      fault_here();
    }
    std::fprintf(stderr, "probe: recovered %d times\n", recovered);
    return 0;
  }
  if (launch_first && !launch_and_wait_for_unwinder(cuda)) {
    std::fprintf(stderr, "probe: no kernel launched, or libunwind never loaded\n");
    return 2;
  }
  if (in_libslice) {
    void* array = nullptr;
    array_create(&array, g_nowhere);
  } else {
    fault_here();
  }
  std::fprintf(stderr, "probe: no fault\n");
  return 3;
}
