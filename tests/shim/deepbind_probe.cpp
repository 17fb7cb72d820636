// dlopen(RTLD_NOW | RTLD_DEEPBIND) of a library linked against libcuda (directly, or through a library
// it needs), then: where does its cuMemAlloc_v2 lead? Under LD_PRELOAD=libslice.so it must be
// libslice's wrapper (the dlopen hook cleared the flag); with SLICE_DISABLE=1 the flag is left
// alone and DEEPBIND binds the library to the driver itself, which shows that the first answer is
// the hook's doing. `bundled`: a plugin that does not need the driver keeps its flag, and with it its
// own copy of a function the program exports too (this program's deepbind_own_symbol answers 2).
// Usage: deepbind_probe LIBRARY slice|driver|bundled
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

const char* owner_of(void* address, const char** symbol) {
  Dl_info info{};
  if (address == nullptr || dladdr(address, &info) == 0 || info.dli_fname == nullptr) return "nothing";
  *symbol = info.dli_sname != nullptr ? info.dli_sname : "?";
  const char* base = std::strrchr(info.dli_fname, '/');
  return base != nullptr ? base + 1 : info.dli_fname;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int deepbind_own_symbol() { return 2; }

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[2], "slice") != 0 && std::strcmp(argv[2], "driver") != 0 &&
                    std::strcmp(argv[2], "bundled") != 0)) {
    std::fprintf(stderr, "usage: %s LIBRARY slice|driver|bundled\n", argv[0]);
    return 2;
  }
  const char* symbol = "";
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload != nullptr && std::strstr(preload, "libslice.so") != nullptr &&
      std::strncmp(owner_of(reinterpret_cast<void*>(&dlopen), &symbol), "libslice.so", 11) != 0) {
    std::fprintf(stderr, "dlopen is not libslice's here: the test would prove nothing\n");
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen(%s, RTLD_DEEPBIND): %s\n", argv[1], dlerror());
    return 2;
  }
  if (std::strcmp(argv[2], "bundled") == 0) {
    const auto answer = reinterpret_cast<int (*)()>(dlsym(lib, "deepbind_bundled_answer"));
    const int got = answer != nullptr ? answer() : -1;
    std::printf("a plugin opened RTLD_DEEPBIND calls %s copy\n", got == 1 ? "its own" : "the program's");
    if (got != 1) std::fprintf(stderr, "FAIL: RTLD_DEEPBIND was cleared for a plugin that does not need the driver\n");
    return got == 1 ? 0 : 1;
  }
  auto address_of = reinterpret_cast<void* (*)()>(dlsym(lib, "deepbind_cuMemAlloc_v2_address"));
  if (address_of == nullptr) {
    std::fprintf(stderr, "deepbind_cuMemAlloc_v2_address: %s\n", dlerror());
    return 2;
  }
  const char* owner = owner_of(address_of(), &symbol);
  std::printf("cuMemAlloc_v2 of a library opened RTLD_DEEPBIND: %s in %s\n", symbol, owner);
  const bool want_slice = std::strcmp(argv[2], "slice") == 0;
  const char* want = want_slice ? "libslice.so" : "libcuda.so";
  if (std::strncmp(owner, want, std::strlen(want)) != 0 || std::strcmp(symbol, "cuMemAlloc_v2") != 0) {
    std::fprintf(stderr, "FAIL: expected cuMemAlloc_v2 in %s%s\n", want,
                 want_slice ? " (RTLD_DEEPBIND was not cleared: the library escapes libslice)" : "");
    return 1;
  }
  return 0;
}
