// The first call that opens the driver or NVML (issue 25). libslice opens each with its own dlopen,
// at the first hooked call, from whatever thread makes it; nobody may wait for that thread:
//
//   first_open_probe fork      a thread's nvmlInit_v2 opens NVML (SIMGPU_LOAD_US makes the load
//                              slow) while the main thread forks; the child calls nvmlInit_v2 too.
//                              A child that waited for the opener, a thread it does not have, hung.
//   first_open_probe loader    a library's constructor (so with the loader's lock held) calls the
//                              driver while another thread's first call is opening it, and that
//                              open waits for the loader's lock. Waiting for the opener was a deadlock.
//
// Prints "ok ..." lines and exits 0; a hang ends at an alarm (exit by SIGALRM).
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

using IntFn = int (*)();
using CountFn = int (*)(int*);

// The hook libslice exports (the program reaches it as a program linked with the driver would).
template <typename Fn>
Fn exported(const char* name) {
  void* f = dlsym(RTLD_DEFAULT, name);
  Dl_info info{};
  if (f == nullptr || dladdr(f, &info) == 0 || info.dli_fname == nullptr ||
      std::strstr(info.dli_fname, "libslice.so") == nullptr) {
    std::fprintf(stderr, "%s is not libslice's here: run with libslice preloaded\n", name);
    std::exit(2);
  }
  return reinterpret_cast<Fn>(f);
}

int fork_during_open() {
  const IntFn init = exported<IntFn>("nvmlInit_v2");
  pthread_t opener;
  pthread_create(
      &opener, nullptr,
      [](void* fn) -> void* { return reinterpret_cast<void*>(static_cast<long>(reinterpret_cast<IntFn>(fn)())); },
      reinterpret_cast<void*>(init));
  usleep(100'000);  // the load takes SIMGPU_LOAD_US: it is under way
  const pid_t child = fork();
  if (child == 0) {
    alarm(10);
    const int rc = init();
    std::printf("ok: the child's nvmlInit_v2 returned %d\n", rc);
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  void* rc = nullptr;
  pthread_join(opener, &rc);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::printf("FAIL: the child forked during the first open %s\n",
                WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM ? "hung" : "failed");
    return 1;
  }
  std::printf("ok: the opener's nvmlInit_v2 returned %ld\n", reinterpret_cast<long>(rc));
  return 0;
}

std::atomic<bool> g_in_constructor{false};

int loader_lock(const char* library) {
  const CountFn count = exported<CountFn>("cuDeviceGetCount");
  pthread_t loader;
  pthread_create(
      &loader, nullptr,
      [](void* path) -> void* { return dlopen(static_cast<const char*>(path), RTLD_NOW | RTLD_LOCAL); },
      const_cast<char*>(library));
  // Its constructor runs, with the loader's lock, and calls the driver in a moment: open it now.
  while (!g_in_constructor.load()) usleep(1000);
  int n = 0;
  const int rc = count(&n);
  void* handle = nullptr;
  pthread_join(loader, &handle);
  if (handle == nullptr) return std::printf("FAIL: %s did not load: %s\n", library, dlerror()), 1;
  std::printf("ok: cuDeviceGetCount from the opener returned %d, the constructor's %d\n", rc,
              *static_cast<int*>(dlsym(handle, "first_open_constructor_rc")));
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) void first_open_in_constructor() { g_in_constructor.store(true); }

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  alarm(30);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "fork") return fork_during_open();
  if (mode == "loader" && argc == 3) return loader_lock(argv[2]);
  std::fprintf(stderr, "usage: %s fork | loader CONSTRUCTOR_LIBRARY\n", argv[0]);
  return 2;
}
