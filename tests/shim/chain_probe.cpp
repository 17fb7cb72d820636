// Runs under LD_PRELOAD with libslice.so and libshim_chain_other.so in either order: getpid goes
// through the other library's wrapper, which must reach libc's getpid via dlsym(RTLD_NEXT).
#include <dlfcn.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

int main() {
  Dl_info info{};
  void* our_dlsym = reinterpret_cast<void*>(&dlsym);
  if (dladdr(our_dlsym, &info) == 0 || std::strstr(info.dli_fname, "libslice.so") == nullptr) {
    std::fprintf(stderr, "dlsym is not libslice's here (%s): the test would prove nothing\n",
                 info.dli_fname ? info.dli_fname : "?");
    return 2;
  }
  const pid_t via_wrapper = getpid();
  const pid_t truth = static_cast<pid_t>(syscall(SYS_getpid));
  auto* calls = static_cast<int*>(dlsym(RTLD_DEFAULT, "chain_other_calls"));
  if (calls == nullptr || *calls < 1) {
    std::fprintf(stderr, "the other library's getpid wrapper did not run\n");
    return 2;
  }
  if (via_wrapper != truth) {
    std::fprintf(stderr, "getpid through the chain gave %d, expected %d\n", via_wrapper, truth);
    return 1;
  }
  // Our own RTLD_NEXT look-up from the executable must also be relative to it: the next getpid
  // after the executable is the other library's wrapper (first in the global scope after us).
  void* next = dlsym(RTLD_NEXT, "getpid");
  if (next == nullptr || dladdr(next, &info) == 0 || std::strstr(info.dli_fname, "chain_other") == nullptr) {
    std::fprintf(stderr, "dlsym(RTLD_NEXT, getpid) from the executable: %s\n",
                 info.dli_fname ? info.dli_fname : "nothing");
    return 1;
  }
  std::printf("chain ok: getpid=%d, wrapper calls=%d\n", via_wrapper, *calls);
  return 0;
}
