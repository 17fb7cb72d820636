// What every hook shares, generated or written by hand: the export attribute, the one way a hook
// learns whether to charge, pass the call through, or fail closed, and the one way to call the driver.
#pragma once

#include <type_traits>

#include "hook_frame.h"
#include "nvml_api.h"
#include "session.h"
#include "shim.h"

#define SLICE_EXPORT __attribute__((visibility("default")))

// The body of a hand-written wrapper (SLICE_HOOK_CU_CUSTOM and SLICE_HOOK_NVML entries): hidden,
// named slice_hook_<export>. The export itself is generated around it (shim/hooks.cpp), in the
// hook's frame (hook_frame.h):  SLICE_HOOK_BODY(CUresult, cuMemAlloc_v2)(CUdeviceptr* dptr, ...) {
#define SLICE_HOOK_BODY(ret, name) extern "C" __attribute__((visibility("hidden"))) ret slice_hook_##name
#define SLICE_HOOK_CU_CUSTOM(name, ret, params, args) SLICE_HOOK_BODY(ret, name) params;
#define SLICE_HOOK_NVML(name, ret, params, args) SLICE_HOOK_BODY(ret, name) params;
#define SLICE_HOOK_CU(name, ret, params, args)
#define SLICE_HOOK_CU_AROUND(name, ret, params, args, helper, lead)
#define SLICE_HOOK_NVML_AROUND(name, ret, params, args, helper, lead)
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU_CUSTOM
#undef SLICE_HOOK_NVML
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_CU_AROUND
#undef SLICE_HOOK_NVML_AROUND

namespace slice::shim {

// The answer of every hooked CUDA call in a failed session: never "unlimited".
inline constexpr CUresult kFailedClosed = CUDA_ERROR_INVALID_VALUE;

// Runs `charged(session)` when libslice accounts this process, `passthrough()` when it does not,
// and answers kFailedClosed when it failed closed.
template <typename Charged, typename Passthrough>
CUresult accounted(Charged&& charged, Passthrough&& passthrough) {
  bool failed = false;
  Session* s = running_session(failed);
  if (failed) return kFailedClosed;
  if (s == nullptr) return passthrough();
  return charged(*s);
}

// The driver's call, then `then(session)` when it succeeded in a process libslice accounts: the
// shape of every hook whose bookkeeping follows a successful call (a free, a trim, a destroy).
template <typename Call, typename Then>
CUresult after_success(Call&& call, Then&& then) {
  return accounted(
      [&](Session& s) {
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS) then(s);
        return rc;
      },
      call);
}

// The driver's call of a generated wrapper (SLICE_HOOK_CU_AROUND), as its helper receives it: a
// reference to the wrapper's lambda, so that helpers need not be templates in headers. It lives
// only as long as the call it is passed to.
class RealCall {
 public:
  template <typename F>
  requires(!std::is_same_v<std::remove_cvref_t<F>, RealCall>) RealCall(F&& f)
  noexcept  // NOLINT: made implicitly from the lambda at every generated call
      : target_(const_cast<void*>(static_cast<const void*>(&f))),
        thunk_([](void* t) -> CUresult { return (*static_cast<std::remove_reference_t<F>*>(t))(); }) {}
  CUresult operator()() const { return thunk_(target_); }

 private:
  void* target_;
  CUresult (*thunk_)(void*);
};

// What a call of a library that is not installed answers: the driver CUDA_ERROR_NOT_INITIALIZED (no
// cuInit can have succeeded), NVML NVML_ERROR_UNINITIALIZED.
template <typename Ret>
constexpr Ret absent_answer() {
  if constexpr (std::is_same_v<Ret, nvmlReturn_t>)
    return NVML_ERROR_UNINITIALIZED;
  else
    return CUDA_ERROR_NOT_INITIALIZED;
}

// The program's call of the real function of a hook: in the hook's frame, errno is the program's
// going in and the driver's coming out (hook_frame.h). An absent library answers as it would.
template <typename Fn, typename... Args>
[[gnu::always_inline]] inline auto call_real(Fn fn, Args... args) -> decltype(fn(args...)) {
  using Ret = decltype(fn(args...));
  if (fn == nullptr) return absent_answer<Ret>();
  return frame_call(fn, args...);
}

// A hook reached from inside another (hook_frame.h): straight to the real function, nothing else.
template <typename Ret, typename Fn, typename... Args>
Ret pass_through(Fn fn, Args... args) {
  return fn != nullptr ? fn(args...) : absent_answer<Ret>();
}
#define SLICE_CALL_REAL(fn, ...) ::slice::shim::call_real(SLICE_REAL(fn) __VA_OPT__(, ) __VA_ARGS__)

// libslice's own call of a real function inside a hook (undoing what it refused, a question of its
// own): outside the frame's record, so the program still sees the errno its own call left.
template <typename Fn, typename... Args>
[[gnu::always_inline]] inline auto own_call(Fn fn, Args... args) -> decltype(fn(args...)) {
  return fn != nullptr ? fn(args...) : absent_answer<decltype(fn(args...))>();
}
#define SLICE_OWN_CALL(fn, ...) ::slice::shim::own_call(SLICE_REAL(fn) __VA_OPT__(, ) __VA_ARGS__)

// Charges `bytes` on `device`, runs `call`, and gives the charge back if the call failed.
template <typename Call>
CUresult charge_around(Session& s, int device, std::uint64_t bytes, const char* what, Call&& call) {
  if (!charge(s, device, bytes, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) uncharge(s, device, bytes);
  return rc;
}

// Records a charge under `key`; where the table still had the key (its memory was freed behind our
// back), the old charge is given back.
void record(Session& s, AllocationTable& table, std::uint64_t key, Charge charge);

// Frees what `key` recorded in `table` with `call`: the record is taken before the driver frees
// it (once freed, another thread may be handed the same address or handle), given back when the
// call succeeds, and put back when it fails.
template <typename Call>
CUresult free_recorded(Session& s, AllocationTable& table, std::uint64_t key, Call&& call) {
  const std::optional<Charge> c = table.take(key);
  const CUresult rc = call();
  if (c) {
    if (rc == CUDA_SUCCESS)
      uncharge(s, c->device, c->bytes);
    else
      table.insert(key, *c);
  }
  return rc;
}

// Moves a recorded charge to `bytes` once the driver said what it really took (pitch, pools, graph memory),
// cap or no cap: the memory exists either way.
void settle_charge(Session& s, int device, std::uint64_t charged, std::uint64_t bytes);

}  // namespace slice::shim
