// dlopen's caller-relative behaviour under libslice's dlopen hook: glibc picks the caller from the
// return address, and with it the RUNPATH searched and what "$ORIGIN" in a file name means. A hook
// that called the real dlopen from C would make libslice the caller and break both. Also
// dlopen(NULL) and RTLD_NOLOAD, which the hook must pass through as they are.
// Usage: dlopen_probe CALLER_LIBRARY (the dlopen_caller library, next to its dlopen_runpath/)
#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

constexpr char kTarget[] = "libshim_dlopen_target.so";
int failures = 0;

void check(bool ok, const char* what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what);
  if (!ok) {
    const char* error = dlerror();
    if (error != nullptr) std::printf("  dlerror: %s\n", error);
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CALLER_LIBRARY\n", argv[0]);
    return 2;
  }
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload != nullptr && std::strstr(preload, "libslice.so") != nullptr) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&dlopen), &info) == 0 || std::strstr(info.dli_fname, "libslice.so") == nullptr) {
      std::fprintf(stderr, "dlopen is not libslice's here: the test would prove nothing\n");
      return 2;
    }
  }

  // dlopen(NULL): the main program.
  void* self = dlopen(nullptr, RTLD_NOW);
  struct link_map* map = nullptr;
  check(self != nullptr && dlinfo(self, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name[0] == '\0',
        "dlopen(NULL) is the main program");
  check(self != nullptr && dlopen(nullptr, RTLD_LAZY) == self, "dlopen(NULL) twice gives one handle");

  // RTLD_NOLOAD of something not loaded: NULL, and nothing loaded. The executable itself cannot
  // find the target by name either: only the caller library's RUNPATH can.
  check(dlopen(kTarget, RTLD_NOW | RTLD_NOLOAD) == nullptr, "RTLD_NOLOAD of a library not loaded is NULL");
  check(dlopen(kTarget, RTLD_NOW) == nullptr, "the executable cannot find the target by name (test setup)");

  void* caller = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  check(caller != nullptr, "the caller library opens");
  if (caller == nullptr) return 1;
  auto caller_open = reinterpret_cast<void* (*)(const char*, int)>(dlsym(caller, "dlopen_caller_open"));
  check(caller_open != nullptr, "dlopen_caller_open found");
  if (caller_open == nullptr) return 1;

  void* target = caller_open(kTarget, RTLD_NOW | RTLD_LOCAL);
  check(target != nullptr, "the caller's RUNPATH finds its target by name");
  auto value = target != nullptr ? reinterpret_cast<int (*)()>(dlsym(target, "dlopen_target_value")) : nullptr;
  check(value != nullptr && value() == 42, "the target's RPATH ($ORIGIN) dependency resolves");
  check(target != nullptr &&
            caller_open("$ORIGIN/dlopen_runpath/libshim_dlopen_target.so", RTLD_NOW | RTLD_LOCAL) == target,
        "\"$ORIGIN\" in a file name is the caller's folder");
  check(target != nullptr && dlopen(kTarget, RTLD_NOW | RTLD_NOLOAD) == target,
        "RTLD_NOLOAD of a loaded library gives its handle");
  check(target != nullptr && caller_open(kTarget, RTLD_NOW | RTLD_NOLOAD | RTLD_DEEPBIND) == target,
        "RTLD_NOLOAD | RTLD_DEEPBIND from the caller gives the same handle");

  std::printf("%s\n", failures == 0 ? "dlopen caller-relative: all ok" : "dlopen caller-relative: FAILED");
  return failures == 0 ? 0 : 1;
}
