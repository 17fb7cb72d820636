// The process's libslice session: its configuration (read once), its tenant, its membership of the
// coordinator, its GPUs by UUID, and what it holds. Started by cuInit (or, where the application
// initialised the driver some other way, by the first hook that needs it); nothing happens at load.
//
// States: fresh (nothing decided yet), passthrough (SLICE_DISABLE=1: libslice is not there),
// failed (bad configuration or an unusable coordinator: every hooked CUDA call fails with
// CUDA_ERROR_INVALID_VALUE, never "unlimited"), running (memory is charged).
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "allocation_table.h"
#include "config.h"
#include "coordinator.h"

namespace slice::shim {

enum class SessionState : int { fresh, passthrough, failed, running };

struct SessionDevice {
  CUdevice handle = 0;  // the driver's, for the ordinal below
  int ordinal = 0;      // as this process numbers devices (CUDA_VISIBLE_DEVICES applied)
  Uuid uuid{};
  std::string uuid_text;  // "GPU-..."
  std::string name;
  std::uint64_t total_bytes = 0;
};

class PoolAccounts;
class VmmAccounts;
class IpcAccounts;
class ManagedAccounts;
class Compute;

struct Session {
  Config config;
  std::unique_ptr<Coordinator> coordinator;
  std::vector<SessionDevice> devices;  // index = coordinator device index = ordinal
  AllocationTable pointers;            // cuMemAlloc*, pitch, managed: base address -> charge
  AllocationTable arrays;              // CUarray and CUmipmappedArray handles -> charge
  AllocationTable pool_pointers;       // stream-ordered allocations: address -> size, owner = the pool
  AllocationTable contexts;            // context handle -> what creating it took
  // Each device's primary context while it is active (0: none), so its release can find it.
  std::array<std::atomic<std::uint64_t>, kMaxDevices> primary_contexts{};
  std::unique_ptr<PoolAccounts> pools;
  std::unique_ptr<VmmAccounts> vmm;
  std::unique_ptr<IpcAccounts> ipc;
  std::unique_ptr<ManagedAccounts> managed;
  std::unique_ptr<Compute> compute;  // made once the coordinator is joined
  // Reconciliation with the driver's figure (shim/reconcile.h): when each device was last done.
  std::array<std::atomic<std::uint64_t>, kMaxDevices> reconciled_ns{};
  std::mutex reconcile_mu;

  Session();
  ~Session();
  // Device index of a driver device handle / UUID; -1 when unknown.
  int index_of(CUdevice device) const;
  int index_of_uuid(const std::string& uuid_text) const;
};

SessionState session_state() noexcept;

// The configuration, parsed once from the environment; nullptr when it is invalid (the error line
// is written once, at the first call that needs it).
const Config* session_config() noexcept;

// Starts the session once, whoever calls first (cuInit after the driver's, nvmlInit, a hook): names
// the tenant, reads the GPUs, joins the coordinator. A bad configuration fails closed here without
// touching the driver. CUDA_SUCCESS, or CUDA_ERROR_INVALID_VALUE (failed).
CUresult start_session() noexcept;

namespace detail {
// The state and the running session (shim/session.cpp), read by every hook.
extern std::atomic<SessionState> g_state;
extern std::atomic<Session*> g_session;
Session* start_running_session(bool& failed) noexcept;  // running_session, when not running yet
}  // namespace detail

// The running session, starting it first if the driver is already initialised; nullptr when the
// hook should pass the call through. `failed` is set when the hook must answer
// CUDA_ERROR_INVALID_VALUE instead. Running: inline, two loads.
inline Session* running_session(bool& failed) noexcept {
  if (detail::g_state.load(std::memory_order_acquire) == SessionState::running) {
    failed = false;
    return detail::g_session.load(std::memory_order_acquire);
  }
  return detail::start_running_session(failed);
}

// The running session if there is one; never starts anything (for reports and NVML).
Session* current_session() noexcept;

// The calling thread's current context: its handle (the owner key of what is allocated in it) and
// its device as a session index (-1 when there is no context). One driver call; the device of a
// context is remembered per thread until any context is destroyed.
struct CurrentContext {
  std::uint64_t key = 0;
  int device = -1;
};
CurrentContext current_context(const Session& s) noexcept;
inline int current_device_index(const Session& s) noexcept { return current_context(s).device; }
// Forgets every thread's remembered context -> device (a destroyed context's handle may come back
// for another device).
void contexts_changed() noexcept;
std::uint64_t contexts_generation() noexcept;  // how many times contexts_changed() ran
// The launch path's cheaper variant: the calling thread's current context as it was last seen,
// without asking the driver, until this thread changes contexts through a hooked call
// (cuCtxSetCurrent, Push, Pop, Create, Destroy: current_context_changed_here) or any context is
// destroyed. A stale answer only puts a launch in the wrong lane of the compute gate; memory is
// always charged with current_context.
CurrentContext launch_context(const Session& s) noexcept;
void current_context_changed_here() noexcept;

// Charges `bytes` on device `device` for `what` (a driver function's name), or writes the refusal's
// warn line and returns false. A refusal is retried once after settling the pools and once after
// reconciling with the driver: either may have freed room since. Inline up to the coordinator; what follows a first
// refusal (charge_after_refusal: settling the pools, reconciling, the warn line) is out of line.
bool charge_after_refusal(Session& s, int device, std::uint64_t bytes, const char* what, Refusal& why);
inline bool charge(Session& s, int device, std::uint64_t bytes, const char* what) {
  Refusal why;
  return s.coordinator->reserve(device, bytes, &why) || charge_after_refusal(s, device, bytes, what, why);
}
inline void uncharge(Session& s, int device, std::uint64_t bytes) noexcept {
  if (bytes != 0) s.coordinator->release(device, bytes);
}

}  // namespace slice::shim
