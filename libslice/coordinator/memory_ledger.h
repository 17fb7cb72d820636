// The memory ledger of one tenant: device memory is taken against the tenant's cap with a
// compare-and-swap on the tenant's total, and every process also keeps its own share in its slot.
//
// Each change is metered first (usage_meter.h): the memory this process held until then is
// charged to the tenant's usage record, on the coarse clock (to a few ms; usage_meter.h says how
// exact). No other clock is read on the way, unless a recount is to be waited for.
//
// No lock on reserve or release. A process killed anywhere (mid-reservation too) is repaired by a
// recount: with new changes held back for a moment and the changes already under way finished, each
// device's total is rebuilt from the live processes' slots. A recount derives the totals instead of
// subtracting a dead process's share, so two processes that both notice a death cannot return it
// twice.
#pragma once

#include <cstdint>

#include "tenant_file.h"

namespace slice {

struct Refusal {
  std::uint64_t usage = 0;  // the tenant's usage on the device when refused
  std::uint64_t cap = 0;
};

class MemoryLedger {
 public:
  MemoryLedger(TenantFileHandle& tenant, int slot) : tenant_(tenant), slot_(slot) {}

  // Takes `bytes` on device entry `device` if the tenant stays within `cap`, else refuses (and says
  // why). A refusal first makes sure no dead process's memory is still counted. `now_ns`: the
  // coarse clock (coarse_monotonic_ns()) where the caller has just read it, for metering.
  bool reserve(int device, std::uint64_t bytes, std::uint64_t cap, Refusal* why = nullptr, std::uint64_t now_ns = 0);
  // Gives back bytes this process took.
  void release(int device, std::uint64_t bytes);
  // Adds bytes the driver already gave out, whatever the cap; past the recount deadline it goes
  // ahead like a release, so it never fails.
  void add_unchecked(int device, std::uint64_t bytes);

  // Rebuilds the tenant's totals from its live processes and frees dead processes' slots. Returns
  // how many dead slots it freed, or -1 when it could not finish (others kept recounting, or a live
  // process stopped in the middle of a change past the deadline).
  int recount();
  // Zeroes this process's own slot (which a dead process may have left with usage in it) as a
  // change under way, so that a recount running meanwhile neither counts the stale values nor
  // misses their clearing. The caller holds the slot's lock.
  void clear_slot();
  // True if a slot is marked live but no process holds it (cheap enough for a refusal path: one
  // system call per slot in use).
  bool any_dead_slot() const;

  std::uint64_t usage(int device) const;
  std::uint64_t mine(int device) const;

 private:
  // Marks this process's change as under way; false when a recount is in progress (then wait).
  bool begin_change(int device);
  // For changes that may never be refused (releases, clearing a slot): like begin_change, but past
  // the recount deadline it goes ahead.
  void begin_change_by_deadline(int device);
  // Out of the common paths' way (so that they stay short): begin_change_by_deadline's wait behind a
  // recount, and reserve's, with its recount before a refusal.
  [[gnu::noinline]] void begin_change_after_recount(int device);
  [[gnu::noinline]] bool reserve_patiently(int device, std::uint64_t bytes, std::uint64_t cap, Refusal* why);
  void end_change(int device);
  // Waits until no live process recounts (clearing the flag of a dead one). False at the deadline.
  bool wait_for_recount(std::uint64_t deadline);

  TenantFileHandle& tenant_;
  int slot_;
};

}  // namespace slice
