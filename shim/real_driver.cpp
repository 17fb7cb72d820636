// The real driver and NVML, reached only through libslice's own dlopen handles. Resolved lazily and
// once per library (std::call_once), so a process that never calls CUDA or NVML never opens them,
// and the first call may come from any thread. real_function's fast path is inline (shim.h).
#include <dlfcn.h>

#include <atomic>
#include <mutex>

#include "shim.h"

namespace slice::shim {

namespace detail {
constinit RealFunctions g_real_cuda;
constinit RealFunctions g_real_nvml;
}  // namespace detail

namespace {

struct RealLibrary {
  constexpr RealLibrary(detail::RealFunctions& t, HookLibrary w, const char* s) : table(t), which(w), soname(s) {}
  std::once_flag once;
  void* handle = nullptr;
  detail::RealFunctions& table;  // filled for this library's hooks only
  HookLibrary which;
  const char* soname;
};

// Constant-initialized: nothing runs at load time.
constinit RealLibrary g_cuda(detail::g_real_cuda, HookLibrary::cuda, "libcuda.so.1");
constinit RealLibrary g_nvml(detail::g_real_nvml, HookLibrary::nvml, "libnvidia-ml.so.1");
std::atomic<DlsymFn> g_real_dlsym{nullptr};

void open_library(RealLibrary& lib) {
  struct MarkOpened {
    RealLibrary& lib;
    ~MarkOpened() { lib.table.opened.store(true, std::memory_order_release); }  // after the table
  } mark{lib};
  void* handle = dlopen(lib.soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return;  // no driver: the wrappers answer as an absent driver would
  lib.handle = handle;
  const DlsymFn lookup = real_dlsym();
  if (lookup == nullptr) return;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    const HookInfo& info = hook_info(static_cast<Hook>(i));
    if (info.library == lib.which) lib.table.functions[i] = lookup(handle, info.name);
  }
}

RealLibrary& opened(RealLibrary& lib) {
  std::call_once(lib.once, open_library, std::ref(lib));
  return lib;
}

}  // namespace

DlsymFn real_dlsym() noexcept {
  DlsymFn fn = g_real_dlsym.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  // dlvsym is not hooked, so this cannot come back to us. Racing threads store the same value.
  void* sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
  if (sym == nullptr) sym = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
  fn = reinterpret_cast<DlsymFn>(sym);
  g_real_dlsym.store(fn, std::memory_order_release);
  return fn;
}

void* detail::open_real_function(Hook hook) noexcept {
  const auto i = static_cast<std::size_t>(hook);
  return opened(kHookLibraries[i] == HookLibrary::cuda ? g_cuda : g_nvml).table.functions[i];
}

void* real_cuda_symbol(const char* name) noexcept {
  const RealLibrary& lib = opened(g_cuda);
  const DlsymFn lookup = real_dlsym();
  return lib.handle != nullptr && lookup != nullptr ? lookup(lib.handle, name) : nullptr;
}

void* real_nvml_symbol(const char* name) noexcept {
  const RealLibrary& lib = opened(g_nvml);
  const DlsymFn lookup = real_dlsym();
  return lib.handle != nullptr && lookup != nullptr ? lookup(lib.handle, name) : nullptr;
}

}  // namespace slice::shim
