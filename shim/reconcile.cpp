#include "reconcile.h"

#include <algorithm>
#include <mutex>

#include "keep_errno.h"
#include "nvml_use.h"
#include "session.h"
#include "tenant_file.h"  // monotonic_ns

namespace slice::shim {

bool reconcile(Session& s, int device, std::uint64_t max_age_ns) noexcept {
  const KeepErrno keep;
  std::atomic<std::uint64_t>& last = s.reconciled_ns[device];
  const std::uint64_t now = monotonic_ns();
  if (last.load(std::memory_order_relaxed) + max_age_ns > now) return false;
  std::unique_lock<std::mutex> lock(s.reconcile_mu, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // another thread is at it
  last.store(now, std::memory_order_relaxed);
  Coordinator& c = *s.coordinator;
  const std::uint64_t old = c.overhead(device);
  // What hooks charged, read before and after the driver's figure (see reconcile.h).
  const std::uint64_t before = c.mine(device) - std::min(c.mine(device), old);
  const std::optional<std::uint64_t> held = NvmlLook().process_memory(s.devices[device].uuid_text);
  const std::uint64_t after = c.mine(device) - std::min(c.mine(device), old);
  const std::uint64_t charged = std::max(before, after);
  // Not listed although it holds memory: NVML does not see this process under its own PID.
  if (!held || (*held == 0 && charged != 0)) {
    c.set_overhead(device, old, false);
    return false;
  }
  const std::uint64_t overhead = *held > charged ? *held - charged : 0;
  c.set_overhead(device, overhead, true);
  return overhead < old;
}

}  // namespace slice::shim
