// Internal to libslice.so: the hooks of hooked_functions.inc by number, the real driver and NVML
// reached through libslice's own dlopen handles, and the switches every hook reads.
// Nothing here runs at load time: each piece starts on its first use, from any thread.
#pragma once

#include <atomic>
#include <cstddef>
#include <string_view>

namespace slice::shim {

enum class HookLibrary { cuda, nvml };

// One enumerator per entry of hooked_functions.inc, in list order.
enum class Hook : unsigned {
#define SLICE_HOOK_CU(name, ret, params, args) name,
#define SLICE_HOOK_NVML(name, ret, params, args) name,
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_NVML
  count_
};
inline constexpr std::size_t kHookCount = static_cast<std::size_t>(Hook::count_);

// Which library each hook belongs to, known at compile time (real_function's fast path).
inline constexpr HookLibrary kHookLibraries[] = {
#define SLICE_HOOK_CU(name, ret, params, args) HookLibrary::cuda,
#define SLICE_HOOK_NVML(name, ret, params, args) HookLibrary::nvml,
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_NVML
};

struct HookInfo {
  const char* name;  // the exact export
  HookLibrary library;
  void* wrapper;  // libslice's exported wrapper of that export
  Hook hook;
};

// Which hook (if any) answers an export name. Cheap: first bytes checked before anything else.
const HookInfo* find_hook(std::string_view export_name) noexcept;
const HookInfo& hook_info(Hook hook) noexcept;

namespace detail {
// What real_function hands out, per library (shim/real_driver.cpp): `opened` once the library was
// looked up (whether or not it was there), then its hooks' real functions, nullptr where absent.
struct RealFunctions {
  std::atomic<bool> opened{false};
  void* functions[kHookCount] = {};
};
extern RealFunctions g_real_cuda;
extern RealFunctions g_real_nvml;
void* open_real_function(Hook hook) noexcept;  // real_function before its library was looked up
}  // namespace detail

// The real function behind a hook, from libslice's own handle of libcuda.so.1 / libnvidia-ml.so.1
// (opened RTLD_NOW | RTLD_LOCAL on the first call, never through RTLD_NEXT). nullptr when that
// library is not installed or lacks the export. After the first call, inline: one acquire load and
// one load of the table (the library is known at compile time).
inline void* real_function(Hook hook) noexcept {
  const auto i = static_cast<std::size_t>(hook);
  const detail::RealFunctions& lib = kHookLibraries[i] == HookLibrary::cuda ? detail::g_real_cuda : detail::g_real_nvml;
  if (lib.opened.load(std::memory_order_acquire)) return lib.functions[i];
  return detail::open_real_function(hook);
}

// Any other export of the real driver / NVML, from the same handles (nullptr when absent). Reached
// through SLICE_REAL only.
void* real_cuda_symbol(const char* name) noexcept;
void* real_nvml_symbol(const char* name) noexcept;

// The hook list's names, in list order: SLICE_REAL finds a hook by name at compile time.
inline constexpr std::string_view kHookNames[] = {
#define SLICE_HOOK_CU(name, ret, params, args) #name,
#define SLICE_HOOK_NVML(name, ret, params, args) #name,
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_NVML
};
consteval int hook_index(std::string_view name) {
  for (std::size_t i = 0; i < kHookCount; ++i)
    if (kHookNames[i] == name) return static_cast<int>(i);
  return -1;
}

// The one way libslice reaches an original function, typed by its declaration (cuda.h with
// __CUDA_API_VERSION_INTERNAL, or nvml_subset.h): SLICE_REAL(cuMemAlloc_v2)(&p, n). A hooked
// function comes from the hook table (real_function: inline, two loads once opened); any other
// export is looked up once in the same library handle and kept (in atomics, not behind a static
// guard: a fork may come while another thread looks it up). nullptr when the library lacks it.
// (A generic lambda, so that the branch not taken is never instantiated.)
#define SLICE_REAL(fn)                                                                                            \
  ([](auto) noexcept {                                                                                            \
    using Fn = decltype(&::fn);                                                                                   \
    constexpr int index = ::slice::shim::hook_index(#fn);                                                         \
    if constexpr (index >= 0) {                                                                                   \
      return reinterpret_cast<Fn>(::slice::shim::real_function(static_cast<::slice::shim::Hook>(index)));         \
    } else {                                                                                                      \
      static constinit std::atomic<Fn> real{nullptr};                                                             \
      static constinit std::atomic<bool> looked{false};                                                           \
      if (looked.load(std::memory_order_acquire)) return real.load(std::memory_order_relaxed);                    \
      const Fn found =                                                                                            \
          reinterpret_cast<Fn>(std::string_view(#fn).starts_with("nvml") ? ::slice::shim::real_nvml_symbol(#fn)   \
                                                                         : ::slice::shim::real_cuda_symbol(#fn)); \
      real.store(found, std::memory_order_relaxed);                                                               \
      looked.store(true, std::memory_order_release);                                                              \
      return found;                                                                                               \
    }                                                                                                             \
  }(0))

// glibc's dlsym, never our hook: dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34"), then "GLIBC_2.2.5".
using DlsymFn = void* (*)(void*, const char*);
DlsymFn real_dlsym() noexcept;

// SLICE_DISABLE=1: every lookup and call goes straight to the driver. Read once, on first use.
bool disabled() noexcept;

}  // namespace slice::shim
