// The exported wrappers of hooked_functions.inc. For now each one passes its call to the real
// function unchanged. Where the library is not installed, the wrapper answers what a process
// without it would see from a loader that found nothing to call:
//   driver calls: CUDA_ERROR_NOT_INITIALIZED (no cuInit can have succeeded);
//   nvmlInit_v2: NVML_ERROR_LIBRARY_NOT_FOUND, other NVML calls: NVML_ERROR_UNINITIALIZED.
#define __CUDA_API_VERSION_INTERNAL 1  // declares every export by its real name, so cuda.h checks ours
#include <cuda.h>

#include <cstring>
#include <string_view>

#include "shim.h"
#include "slice/nvml_subset.h"

#define SLICE_EXPORT __attribute__((visibility("default")))

namespace slice::shim {
namespace {

constexpr nvmlReturn_t nvml_absent(Hook hook) {
  return hook == Hook::nvmlInit_v2 ? NVML_ERROR_LIBRARY_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
}

}  // namespace
}  // namespace slice::shim

// Generated pass-through wrappers. SLICE_HOOK_CU_CUSTOM entries are written in procaddr_hooks.cpp.
#define SLICE_HOOK_CU_CUSTOM(name, ret, params, args)
#define SLICE_HOOK_CU(name, ret, params, args)                                                 \
  extern "C" SLICE_EXPORT ret name params {                                                    \
    using Fn = ret(*) params;                                                                  \
    const auto real = reinterpret_cast<Fn>(slice::shim::real_function(slice::shim::Hook::name)); \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                    \
    return real args;                                                                          \
  }
#define SLICE_HOOK_NVML(name, ret, params, args)                                               \
  extern "C" SLICE_EXPORT ret name params {                                                    \
    using Fn = ret(*) params;                                                                  \
    const auto real = reinterpret_cast<Fn>(slice::shim::real_function(slice::shim::Hook::name)); \
    if (real == nullptr) return slice::shim::nvml_absent(slice::shim::Hook::name);             \
    return real args;                                                                          \
  }
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_CU_CUSTOM
#undef SLICE_HOOK_NVML

namespace slice::shim {
namespace {

const HookInfo kHooks[] = {
#define SLICE_HOOK_CU(name, ret, params, args) {#name, HookLibrary::cuda, reinterpret_cast<void*>(&::name)},
#define SLICE_HOOK_NVML(name, ret, params, args) {#name, HookLibrary::nvml, reinterpret_cast<void*>(&::name)},
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_NVML
};
static_assert(std::size(kHooks) == kHookCount);

}  // namespace

const HookInfo& hook_info(Hook hook) noexcept { return kHooks[static_cast<std::size_t>(hook)]; }

const HookInfo* find_hook(std::string_view name) noexcept {
  // Fast reject: every hooked name starts with "cu" or "nvml".
  if (name.size() < 3) return nullptr;
  const bool cuda = name[0] == 'c' && name[1] == 'u';
  const bool nvml = !cuda && name[0] == 'n' && name.starts_with("nvml");
  if (!cuda && !nvml) return nullptr;
  for (const HookInfo& info : kHooks) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

}  // namespace slice::shim

// The short public list (libslice.map): versioned, unlike the hooks, which must bind to
// unversioned references to the driver's symbols.
extern "C" SLICE_EXPORT const char* slice_version() { return SLICE_VERSION_STRING; }
