// Another preloaded library that wraps driver functions, as tracers and other shims do, and finds
// the next definition with dlsym(RTLD_NEXT, ...). Built twice (INTERPOSER_NAME a and b) so that two
// can be stacked around libslice. Each counts the calls it saw; one that finds itself recurses, and
// the guard below reports that instead of crashing (issue 25: with libslice second, libslice's dlsym
// hook handed out the global scope's cuMemAlloc_v2, which is this library's own).
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>

#define INTERPOSER_CAT2(a, b) a##b
#define INTERPOSER_CAT(a, b) INTERPOSER_CAT2(a, b)
#define INTERPOSER_CALLS INTERPOSER_CAT(interposer_calls_, INTERPOSER_NAME)

namespace {

thread_local int t_depth = 0;

template <typename Fn, typename... Args>
int chain(const char* name, Args... args) {
  if (t_depth > 0) {
    static const char msg[] = "interposer: dlsym(RTLD_NEXT) found this library again: recursion\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(3);
  }
  ++t_depth;
  const auto next = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  int rc = 999;
  if (next == nullptr) {
    std::fprintf(stderr, "interposer: dlsym(RTLD_NEXT, %s) found nothing\n", name);
  } else {
    rc = next(args...);
  }
  --t_depth;
  return rc;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int INTERPOSER_CALLS = 0;

__attribute__((visibility("default"))) int cuInit(unsigned flags) {
  ++INTERPOSER_CALLS;
  return chain<int (*)(unsigned)>("cuInit", flags);
}

__attribute__((visibility("default"))) int cuMemAlloc_v2(unsigned long long* p, std::size_t bytes) {
  ++INTERPOSER_CALLS;
  return chain<int (*)(unsigned long long*, std::size_t)>("cuMemAlloc_v2", p, bytes);
}

}  // extern "C"
