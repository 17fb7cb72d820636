// The table of hooks (hooked_functions.inc) and the generated wrappers: pass-through ones, and for
// _AROUND entries one call of their helper (around.h). Where the
// library is not installed, a wrapper answers what a process without it would see from a loader
// that found nothing to call:
//   driver calls: CUDA_ERROR_NOT_INITIALIZED (no cuInit can have succeeded);
//   nvmlInit*: NVML_ERROR_LIBRARY_NOT_FOUND, other NVML calls: NVML_ERROR_UNINITIALIZED.
#define __CUDA_API_VERSION_INTERNAL 1  // declares every export by its real name, so cuda.h checks ours
#include <cuda.h>

#include <cstring>
#include <string_view>
#include <type_traits>

#include "session.h"
#include "shim.h"
#include "nvml_api.h"
#include "slice/nvml_subset.h"

#include "around.h"        // the helpers of _AROUND entries
#include "hook_support.h"  // SLICE_EXPORT, call_real, kFailedClosed

// Generated wrappers, each in the hook's frame (hook_frame.h: errno kept, a call from inside
// another hook of this thread straight to the real function): pass-through ones for SLICE_HOOK_CU
// entries (failing closed like every hook), for the _AROUND entries a call of their helper
// (around.h) with the driver's call, and for SLICE_HOOK_CU_CUSTOM and SLICE_HOOK_NVML entries a call
// of the body written by hand in shim/ (SLICE_HOOK_BODY, slice_hook_<export>).
#define SLICE_LEAD_ARGS_(...) __VA_ARGS__ __VA_OPT__(, )  // (a, b) -> a, b,   () -> nothing
#define SLICE_AND_ARGS_(...) __VA_OPT__(, ) __VA_ARGS__   // (a, b) -> , a, b  () -> nothing
#define SLICE_PASS_THROUGH_(name, ret, args) \
  ::slice::shim::HookFrame frame;            \
  if (frame.nested()) return ::slice::shim::pass_through<ret>(SLICE_REAL(name) SLICE_AND_ARGS_ args);
#define SLICE_HOOK_CU_AROUND(name, ret, params, args, helper, lead)                                            \
  extern "C" SLICE_EXPORT ret name params {                                                                    \
    SLICE_PASS_THROUGH_(name, ret, args)                                                                       \
    return ::slice::shim::helper(                                                                              \
        SLICE_LEAD_ARGS_ lead[&] { return ::slice::shim::call_real(SLICE_REAL(name) SLICE_AND_ARGS_ args); }); \
  }
#define SLICE_HOOK_NVML_AROUND(name, ret, params, args, helper, lead)     \
  extern "C" SLICE_EXPORT ret name params {                               \
    SLICE_PASS_THROUGH_(name, ret, args)                                  \
    return ::slice::shim::helper(SLICE_LEAD_ARGS_ lead SLICE_REAL(name)); \
  }
#define SLICE_HOOK_CU_CUSTOM(name, ret, params, args) \
  extern "C" SLICE_EXPORT ret name params {           \
    SLICE_PASS_THROUGH_(name, ret, args)              \
    return slice_hook_##name args;                    \
  }
#define SLICE_HOOK_NVML(name, ret, params, args) SLICE_HOOK_CU_CUSTOM(name, ret, params, args)
#define SLICE_HOOK_CU(name, ret, params, args)                                                                \
  extern "C" SLICE_EXPORT ret name params {                                                                   \
    SLICE_PASS_THROUGH_(name, ret, args)                                                                      \
    const auto real = SLICE_REAL(name);                                                                       \
    if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;                                                   \
    if (slice::shim::session_state() == slice::shim::SessionState::failed) return slice::shim::kFailedClosed; \
    return ::slice::shim::call_real(real SLICE_AND_ARGS_ args);                                               \
  }
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_CU_AROUND
#undef SLICE_HOOK_CU_CUSTOM
#undef SLICE_HOOK_NVML
#undef SLICE_HOOK_NVML_AROUND
#undef SLICE_LEAD_ARGS_
#undef SLICE_AND_ARGS_
#undef SLICE_PASS_THROUGH_

// Every wrapper, generated or written by hand, has exactly the list's signature (cuda.h and
// nvml_api.h declare them by their export names, so a mismatch would not compile either), and so
// has every body written by hand.
#define SLICE_HOOK_CU(name, ret, params, args) static_assert(std::is_same_v<decltype(&::name), ret(*) params>);
#define SLICE_HOOK_CU_CUSTOM(name, ret, params, args) \
  SLICE_HOOK_CU(name, ret, params, args)              \
  static_assert(std::is_same_v<decltype(&::slice_hook_##name), ret(*) params>);
#define SLICE_HOOK_NVML(name, ret, params, args) SLICE_HOOK_CU_CUSTOM(name, ret, params, args)
#define SLICE_HOOK_NVML_AROUND(name, ret, params, args, helper, lead) SLICE_HOOK_CU(name, ret, params, args)
#define SLICE_HOOK_CU_AROUND(name, ret, params, args, helper, lead) SLICE_HOOK_CU(name, ret, params, args)
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_CU_AROUND
#undef SLICE_HOOK_CU_CUSTOM
#undef SLICE_HOOK_NVML
#undef SLICE_HOOK_NVML_AROUND

namespace slice::shim {

namespace detail {
constinit thread_local HookThread t_hook;
}  // namespace detail

namespace {

const HookInfo kHooks[] = {
#define SLICE_HOOK_CU(name, ret, params, args) {#name, HookLibrary::cuda, reinterpret_cast<void*>(&::name), Hook::name},
#define SLICE_HOOK_NVML(name, ret, params, args) \
  {#name, HookLibrary::nvml, reinterpret_cast<void*>(&::name), Hook::name},
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
