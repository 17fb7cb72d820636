// A library that calls dlopen itself, as frameworks do for their plugins. Its RUNPATH
// ($ORIGIN/dlopen_runpath) is the only place its target can be found, and "$ORIGIN" in a file name
// is expanded relative to it: both work only if glibc sees this library, not libslice, as dlopen's
// caller.
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) void* dlopen_caller_open(const char* file, int flags) {
  void* handle = dlopen(file, flags);
  // Not a tail call: a `jmp dlopen` here would make the executable dlopen's caller.
  asm volatile("" ::: "memory");
  return handle;
}
