// A second preloaded library that, like many tools (profilers, tracers, other shims), wraps a libc
// function and finds the real one with dlsym(RTLD_NEXT, ...). With libslice's dlsym hook in the
// process, RTLD_NEXT must still be resolved relative to THIS library, in either preload order;
// an answer of our own getpid would recurse, and the guard below reports that instead of crashing.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

extern "C" {

int chain_other_calls = 0;

__attribute__((visibility("default"))) pid_t getpid(void) {
  static thread_local int depth = 0;
  if (depth > 0) {
    static const char msg[] = "chain_other: getpid recursed: dlsym(RTLD_NEXT) found this library\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
  }
  ++depth;
  using Fn = pid_t (*)(void);
  auto real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "getpid"));
  pid_t pid = -1;
  if (real == nullptr) {
    std::fprintf(stderr, "chain_other: dlsym(RTLD_NEXT, getpid) found nothing\n");
  } else {
    ++chain_other_calls;
    pid = real();
  }
  --depth;
  return pid;
}

}  // extern "C"
