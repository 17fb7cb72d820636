// The real driver and NVML, reached only through libslice's own dlopen handles. Resolved lazily and
// once per library (std::call_once), so a process that never calls CUDA or NVML never opens them,
// and the first call may come from any thread.
#include <dlfcn.h>

#include <array>
#include <atomic>
#include <mutex>

#include "shim.h"

namespace slice::shim {
namespace {

struct RealLibrary {
  std::once_flag once;
  std::atomic<bool> opened{false};  // the fast path: after the first call, one acquire load
  void* handle = nullptr;
  std::array<void*, kHookCount> functions{};  // filled for this library's hooks only
};

RealLibrary g_cuda;
RealLibrary g_nvml;
std::atomic<DlsymFn> g_real_dlsym{nullptr};

void open_library(RealLibrary& lib, HookLibrary which, const char* soname) {
  struct MarkOpened {
    RealLibrary& lib;
    ~MarkOpened() { lib.opened.store(true, std::memory_order_release); }
  } mark{lib};
  void* handle = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) return;  // no driver: the wrappers answer as an absent driver would
  lib.handle = handle;
  const DlsymFn lookup = real_dlsym();
  if (lookup == nullptr) return;
  for (std::size_t i = 0; i < kHookCount; ++i) {
    const HookInfo& info = hook_info(static_cast<Hook>(i));
    if (info.library == which) lib.functions[i] = lookup(handle, info.name);
  }
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

void* real_function(Hook hook) noexcept {
  if (kHookLibraries[static_cast<std::size_t>(hook)] == HookLibrary::cuda) {
    if (!g_cuda.opened.load(std::memory_order_acquire))
      std::call_once(g_cuda.once, open_library, std::ref(g_cuda), HookLibrary::cuda, "libcuda.so.1");
    return g_cuda.functions[static_cast<std::size_t>(hook)];
  }
  if (!g_nvml.opened.load(std::memory_order_acquire))
    std::call_once(g_nvml.once, open_library, std::ref(g_nvml), HookLibrary::nvml, "libnvidia-ml.so.1");
  return g_nvml.functions[static_cast<std::size_t>(hook)];
}

void* real_cuda_symbol(const char* name) noexcept {
  std::call_once(g_cuda.once, open_library, std::ref(g_cuda), HookLibrary::cuda, "libcuda.so.1");
  const DlsymFn lookup = real_dlsym();
  return g_cuda.handle != nullptr && lookup != nullptr ? lookup(g_cuda.handle, name) : nullptr;
}

void* real_nvml_symbol(const char* name) noexcept {
  std::call_once(g_nvml.once, open_library, std::ref(g_nvml), HookLibrary::nvml, "libnvidia-ml.so.1");
  const DlsymFn lookup = real_dlsym();
  return g_nvml.handle != nullptr && lookup != nullptr ? lookup(g_nvml.handle, name) : nullptr;
}

}  // namespace slice::shim
