// Context memory. Creating a context (or activating a device's primary context) takes device
// memory the application never asked for: hundreds of MiB on a real GPU. The driver does not say
// how much, so it is measured: this process's device memory as NVML reports it, before and after,
// less what this process charged meanwhile (another thread's allocation is not context memory).
// A context that does not fit in the cap is destroyed again and the call is refused. Destroying
// a context frees the allocations and arrays made in it, so their charges go with it.
#include "accounts.h"
#include "around.h"
#include "compute.h"
#include "hook_support.h"
#include "log.h"
#include "nvml_use.h"

namespace slice::shim {
namespace {

struct Measure {
  std::optional<std::vector<NvmlProcessEntry>> processes;  // NVML's list of the device's processes
  std::uint64_t charged = 0;
};

Measure measure(Session& s, NvmlLook& look, int device) {
  return {look.processes(s.devices[device].uuid_text), s.coordinator->mine(device)};
}

// What the context took: the growth of this process's entry in NVML's list less the growth of our
// own charges. Where the process is not known in the list yet (a PID namespace with its own /proc:
// libslice/coordinator/nvml_identity.h), what grew across the context's creation teaches who it is.
std::uint64_t context_bytes(const Measure& before, const Measure& after) {
  if (!before.processes || !after.processes) return 0;
  nvml_identity().observe_context(*before.processes, *after.processes);
  const std::optional<std::uint64_t> was = own_entry(*before.processes), is = own_entry(*after.processes);
  if (!was || !is) return 0;
  const std::uint64_t grew = *is > *was ? *is - *was : 0;
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
  forget_ipc_exports(s, 0, ctx);                // what it exported is freed with it
  std::lock_guard<std::mutex> lock(s.ipc->mu);  // IPC memory opened in it is closed with it
  std::erase_if(s.ipc->opens, [&](const auto& entry) {
    if (entry.second.context != ctx) return false;
    uncharge(s, entry.second.device, entry.second.bytes);
    return true;
  });
}

// Charges a context just created; false (and a refusal line) when it does not fit.
bool charge_context(Session& s, NvmlLook& look, int device, std::uint64_t ctx, const Measure& before,
                    const char* what) {
  const std::uint64_t bytes = context_bytes(before, measure(s, look, device));
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

}  // namespace

CUresult create_context(CUcontext* pctx, CUdevice dev, RealCall call) {
  constexpr const char* what = "cuCtxCreate";
  current_context_changed_here();  // a created context is made current
  return accounted(
      [&](Session& s) {
        const int device = s.index_of(dev);
        if (device < 0) return call();
        NvmlLook look;  // NVML stays started from before to after
        const Measure before = measure(s, look, device);
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        if (!charge_context(s, look, device, reinterpret_cast<std::uint64_t>(*pctx), before, what)) {
          SLICE_OWN_CALL(cuCtxDestroy_v2, *pctx);
          *pctx = nullptr;
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        return rc;
      },
      call);
}

// The compute watcher forgets the context's streams and events before the driver destroys them.
CUresult destroy_context(CUcontext ctx, RealCall call) {
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
CUresult release_primary_context(CUdevice dev, RealCall call) {
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

}  // namespace slice::shim

using namespace slice::shim;

SLICE_HOOK_BODY(CUresult, cuDevicePrimaryCtxRetain)(CUcontext* pctx, CUdevice dev) {
  const auto call = [&] { return SLICE_CALL_REAL(cuDevicePrimaryCtxRetain, pctx, dev); };
  return accounted(
      [&](Session& s) {
        const int device = s.index_of(dev);
        if (device < 0 || primary_active(dev)) return call();  // already there: no new memory
        NvmlLook look;                                         // NVML stays started from before to after
        const Measure before = measure(s, look, device);
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        const auto key = reinterpret_cast<std::uint64_t>(*pctx);
        if (!charge_context(s, look, device, key, before, "cuDevicePrimaryCtxRetain")) {
          SLICE_OWN_CALL(cuDevicePrimaryCtxRelease_v2, dev);
          *pctx = nullptr;
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        s.primary_contexts[device].store(key);
        return rc;
      },
      call);
}

// Changes of the calling thread's current context: passed through, and the launch path's
// remembered context forgotten.
CUresult slice::shim::switch_context(RealCall call) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  current_context_changed_here();
  const CUresult rc = call();
  current_context_changed_here();
  return rc;
}
