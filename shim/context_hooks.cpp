// Context memory. Creating a context (or activating a device's primary context) takes device
// memory the application never asked for: hundreds of MiB on a real GPU. The driver does not say
// how much, so it is measured: this process's device memory as NVML reports it, before and after,
// less what this process charged meanwhile (another thread's allocation is not context memory).
// A context that does not fit in the cap is destroyed again and the call is refused. Destroying
// a context frees the allocations and arrays made in it, so their charges go with it.
#include "accounts.h"
#include "compute.h"
#include "hook_support.h"
#include "log.h"
#include "own_nvml.h"

namespace slice::shim {
namespace {

struct Measure {
  std::optional<std::uint64_t> process;
  std::uint64_t charged = 0;
};

Measure measure(Session& s, int device) {
  return {own_nvml_process_memory(s.devices[device].uuid_text), s.coordinator->mine(device)};
}

// What the context took: the growth NVML saw less the growth of our own charges.
std::uint64_t context_bytes(const Measure& before, const Measure& after) {
  if (!before.process || !after.process) return 0;
  const std::uint64_t grew = *after.process > *before.process ? *after.process - *before.process : 0;
  const std::uint64_t ours = after.charged > before.charged ? after.charged - before.charged : 0;
  return grew > ours ? grew - ours : 0;
}

// Gives back a destroyed context's own charge and those of everything allocated in it.
void forget_context(Session& s, std::uint64_t ctx) {
  if (ctx == 0) return;
  contexts_changed();
  if (const std::optional<Charge> c = s.contexts.take(ctx)) uncharge(s, c->device, c->bytes);
  for (const Charge& c : s.pointers.take_owned_by(ctx)) uncharge(s, c.device, c.bytes);
  for (const Charge& c : s.arrays.take_owned_by(ctx)) uncharge(s, c.device, c.bytes);
  forget_ipc_exports(s, 0, ctx);  // what it exported is freed with it
  std::lock_guard<std::mutex> lock(s.ipc->mu);  // IPC memory opened in it is closed with it
  std::erase_if(s.ipc->opens, [&](const auto& entry) {
    if (entry.second.context != ctx) return false;
    uncharge(s, entry.second.device, entry.second.bytes);
    return true;
  });
}

// Charges a context just created; false (and a refusal line) when it does not fit.
bool charge_context(Session& s, int device, std::uint64_t ctx, const Measure& before, const char* what) {
  const std::uint64_t bytes = context_bytes(before, measure(s, device));
  if (bytes == 0) return true;
  if (!charge(s, device, bytes, what)) return false;
  record(s, s.contexts, ctx, Charge{device, bytes, 0});
  return true;
}

bool primary_active(CUdevice dev) {
  unsigned int flags = 0;
  int active = 0;
  const auto get = SLICE_REAL(cuDevicePrimaryCtxGetState);
  return get != nullptr && get(dev, &flags, &active) == CUDA_SUCCESS && active != 0;
}

template <typename Call>
CUresult create_context(CUcontext* pctx, CUdevice dev, const char* what, Call&& call) {
  current_context_changed_here();  // a created context is made current
  return accounted(
      [&](Session& s) {
        const int device = s.index_of(dev);
        if (device < 0) return call();
        const Measure before = measure(s, device);
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        if (!charge_context(s, device, reinterpret_cast<std::uint64_t>(*pctx), before, what)) {
          SLICE_CALL_REAL(cuCtxDestroy_v2, *pctx);
          *pctx = nullptr;
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return rc;
      },
      call);
}

// The compute watcher forgets the context's streams and events before the driver destroys them.
template <typename Call>
CUresult destroy_context(CUcontext ctx, Call&& call) {
  current_context_changed_here();
  return accounted(
      [&](Session& s) {
        forget_targets(s, nullptr, ctx);
        contexts_changed();
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS) forget_context(s, reinterpret_cast<std::uint64_t>(ctx));
        return rc;
      },
      call);
}

// After a primary context's release or reset: if it is no longer active, it and what was
// allocated in it are gone.
template <typename Call>
CUresult primary_release(CUdevice dev, Call&& call) {
  return accounted(
      [&](Session& s) {
        // It may go with this call: the watcher forgets the streams it knows on the device first
        // (those of other contexts register again at their next launch).
        if (const int device = s.index_of(dev); device >= 0) forget_lane_targets(s, device);
        contexts_changed();
        const CUresult rc = call();
        const int device = s.index_of(dev);
        if (rc == CUDA_SUCCESS && device >= 0 && !primary_active(dev))
          forget_context(s, s.primary_contexts[device].exchange(0));
        return rc;
      },
      call);
}

}  // namespace
}  // namespace slice::shim

using namespace slice::shim;

extern "C" SLICE_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  const auto call = [&] { return SLICE_CALL_REAL(cuDevicePrimaryCtxRetain, pctx, dev); };
  return accounted(
      [&](Session& s) {
        const int device = s.index_of(dev);
        if (device < 0 || primary_active(dev)) return call();  // already there: no new memory
        const Measure before = measure(s, device);
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        const auto key = reinterpret_cast<std::uint64_t>(*pctx);
        if (!charge_context(s, device, key, before, "cuDevicePrimaryCtxRetain")) {
          SLICE_CALL_REAL(cuDevicePrimaryCtxRelease_v2, dev);
          *pctx = nullptr;
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        s.primary_contexts[device].store(key);
        return rc;
      },
      call);
}

extern "C" SLICE_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  return primary_release(dev, [&] { return SLICE_CALL_REAL(cuDevicePrimaryCtxRelease_v2, dev); });
}

extern "C" SLICE_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev) {
  return primary_release(dev, [&] { return SLICE_CALL_REAL(cuDevicePrimaryCtxRelease, dev); });
}

extern "C" SLICE_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  return primary_release(dev, [&] { return SLICE_CALL_REAL(cuDevicePrimaryCtxReset_v2, dev); });
}

extern "C" SLICE_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev) {
  return primary_release(dev, [&] { return SLICE_CALL_REAL(cuDevicePrimaryCtxReset, dev); });
}

extern "C" SLICE_EXPORT CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create_context(pctx, dev, "cuCtxCreate", [&] { return SLICE_CALL_REAL(cuCtxCreate_v2, pctx, flags, dev); });
}

extern "C" SLICE_EXPORT CUresult cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                                unsigned int flags, CUdevice dev) {
  return create_context(pctx, dev, "cuCtxCreate",
                        [&] { return SLICE_CALL_REAL(cuCtxCreate_v3, pctx, paramsArray, numParams, flags, dev); });
}

extern "C" SLICE_EXPORT CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* ctxCreateParams,
                                                unsigned int flags, CUdevice dev) {
  return create_context(pctx, dev, "cuCtxCreate",
                        [&] { return SLICE_CALL_REAL(cuCtxCreate_v4, pctx, ctxCreateParams, flags, dev); });
}

extern "C" SLICE_EXPORT CUresult cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return create_context(pctx, dev, "cuCtxCreate", [&] { return SLICE_CALL_REAL(cuCtxCreate, pctx, flags, dev); });
}

extern "C" SLICE_EXPORT CUresult cuCtxDestroy(CUcontext ctx) {
  return destroy_context(ctx, [&] { return SLICE_CALL_REAL(cuCtxDestroy, ctx); });
}

extern "C" SLICE_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx) {
  return destroy_context(ctx, [&] { return SLICE_CALL_REAL(cuCtxDestroy_v2, ctx); });
}

// Changes of the calling thread's current context: passed through, and the launch path's
// remembered context forgotten.
template <typename Call>
CUresult switch_context(Call&& call) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  current_context_changed_here();
  const CUresult rc = call();
  current_context_changed_here();
  return rc;
}

extern "C" SLICE_EXPORT CUresult cuCtxSetCurrent(CUcontext ctx) {
  return switch_context([&] { return SLICE_CALL_REAL(cuCtxSetCurrent, ctx); });
}

extern "C" SLICE_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  return switch_context([&] { return SLICE_CALL_REAL(cuCtxPushCurrent_v2, ctx); });
}

extern "C" SLICE_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx) {
  return switch_context([&] { return SLICE_CALL_REAL(cuCtxPushCurrent, ctx); });
}

extern "C" SLICE_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  return switch_context([&] { return SLICE_CALL_REAL(cuCtxPopCurrent_v2, pctx); });
}

extern "C" SLICE_EXPORT CUresult cuCtxPopCurrent(CUcontext* pctx) {
  return switch_context([&] { return SLICE_CALL_REAL(cuCtxPopCurrent, pctx); });
}
