#include "caller_backtrace.h"

#include <dlfcn.h>
#include <execinfo.h>

#include <atomic>
#include <cstdio>

namespace slice::shim {
namespace {

using UnwBacktrace = int (*)(void**, int);

// Looked up once (atomics, not a static guard: a fork may come meanwhile; racing threads find the same).
std::atomic<UnwBacktrace> g_unw{nullptr};
std::atomic<bool> g_unw_looked{false};

UnwBacktrace libunwind_backtrace() {
  if (g_unw_looked.load(std::memory_order_acquire)) return g_unw.load(std::memory_order_relaxed);
  void* handle = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
  const auto fn = handle != nullptr ? reinterpret_cast<UnwBacktrace>(dlsym(handle, "unw_backtrace")) : nullptr;
  g_unw.store(fn, std::memory_order_relaxed);
  g_unw_looked.store(true, std::memory_order_release);
  return fn;
}

}  // namespace

std::string caller_backtrace() {
  void* frames[48];
  const UnwBacktrace unw = libunwind_backtrace();
  const int n = unw != nullptr ? unw(frames, 48) : backtrace(frames, 48);
  // Our own frames say nothing to the user: start at the first frame outside libslice.so.
  Dl_info self{};
  dladdr(reinterpret_cast<void*>(&caller_backtrace), &self);
  int first = 0;
  while (first < n) {
    Dl_info info{};
    if (dladdr(frames[first], &info) == 0 || info.dli_fbase != self.dli_fbase) break;
    ++first;
  }
  std::string out;
  for (int i = first; i < n; ++i) {
    Dl_info info{};
    char line[512];
    if (dladdr(frames[i], &info) != 0 && info.dli_fname != nullptr) {
      const auto offset =
          static_cast<unsigned long>(static_cast<char*>(frames[i]) -
                                     static_cast<char*>(info.dli_saddr != nullptr ? info.dli_saddr : info.dli_fbase));
      std::snprintf(line, sizeof line, "  #%d %p %s(%s+0x%lx)\n", i - first, frames[i], info.dli_fname,
                    info.dli_sname != nullptr ? info.dli_sname : "", offset);
    } else {
      std::snprintf(line, sizeof line, "  #%d %p\n", i - first, frames[i]);
    }
    out += line;
  }
  return out;
}

}  // namespace slice::shim
