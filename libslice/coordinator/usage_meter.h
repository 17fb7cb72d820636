// Metering for chargeback, the writing side: each process of a tenant integrates the memory it
// holds on a device over time into the tenant's MemoryMeter (before each change of that memory,
// and now and then from its compute watcher), and once per wall-clock hour one of them records a
// sample of the cumulative counters for `slicectl usage --since`. Lock-free; the layout and units
// are in coordinator_layout.h. The reading side is usage_history.h.
#pragma once

#include <cstdint>

#include "coordinator_layout.h"
#include "tenant_file.h"

namespace slice {

// A stamp further ahead of the clock than this was taken before a reboot (the monotonic clock
// restarted), not by a racing thread: it is restarted, not waited for.
inline constexpr std::uint64_t kClockRestartNs = 1'000'000'000;

using ByteNs = unsigned __int128;  // byte-nanoseconds: 64 bits hold under 7 minutes of 128 GiB

// Adds byte-ns to a meter.
void add_memory(MemoryMeter& meter, ByteNs amount);
// What the meter holds.
ByteNs metered_memory(const MemoryMeter& meter);
// Integrates one process's memory up to `now_ns` (monotonic): claims the interval since its
// accrued_ns by compare-and-swap and adds used x interval. A claim already past `now_ns` (another
// thread, or a sampler) leaves it; a stamp far in the future (another boot) restarts from now.
void accrue_slot(MemoryMeter& meter, SlotDevice& slot, std::uint64_t now_ns);
// What a process holds and has not integrated yet: used x (now - accrued_ns). For readers.
ByteNs pending_memory(const SlotDevice& slot, std::uint64_t now_ns);

// Whether the sample of a new hour is due (one load).
inline bool usage_sample_due(const UsageRecord& record, std::uint64_t now_ns) {
  const std::uint64_t next = record.memory.next_sample_ns.load(std::memory_order_relaxed);
  return now_ns >= next || next > now_ns + kUsageStepSeconds * 1'000'000'000ull + kClockRestartNs;
}
// Records the sample of the hour `wall_ms` (CLOCK_REALTIME, ms) falls in, unless one is already
// there, with the cumulative counters as they are (the caller folds in what it can first). Also
// sets when the next one is due. Returns true if this call wrote it.
bool record_usage_sample(UsageRecord& record, std::uint64_t device_ns, std::uint64_t now_ns, std::uint64_t wall_ms);

// For a process of the tenant, on device entry `entry` of its file, from its slot `slot`:
// before each change of its memory there (the memory ledger, with `now_ns` from the coarse clock,
// coarse_monotonic_ns() in tenant_file.h) ...
//
// Precision. On the coarse clock a change is metered as made at the kernel's last tick (or at the
// slot's last integration, where a tick or a sampler already went past it): up to one tick,
// coarse_clock_tick_ns() (1-10 ms, 4 ms on most kernels), before it really was. So an allocation of
// B bytes held for D is metered as B x (D +/- one tick): one allocated and freed within a tick may
// count nothing (or a tick). Nothing is counted twice, and a dead process is still never charged
// past its last integration. In exchange, a change within the tick of the slot's last integration
// costs two loads here (the slot's stamp, and whether a sample is due) and no timer read.
void meter_change(TenantFileHandle& tenant, int slot, int entry, std::uint64_t now_ns);  // the work, if any
inline void meter_before_change(TenantFileHandle& tenant, int slot, int entry, std::uint64_t now_ns) {
  TenantFile& f = tenant.file();
  const std::uint64_t last = f.slots[slot].devices[entry].accrued_ns.load();
  // Integrated up to now already (accrue_slot would claim nothing) and no sample due.
  if (last != 0 && last >= now_ns && last <= now_ns + kClockRestartNs && !usage_sample_due(f.usage[entry], now_ns))
    return;
  meter_change(tenant, slot, entry, now_ns);
}
// ... and from a periodic tick (the compute watcher's): integrates its memory once a second at most,
// so that a process that dies loses at most that second, and takes the hour's sample when due.
void meter_tick(TenantFileHandle& tenant, int slot, int entry, std::uint64_t now_ns);

std::uint64_t wall_clock_ms();

// For whoever has just locked a dead process's slot to take it over or free it: the slot's stamps go
// first. Once locked, the slot looks alive to the hourly sample, which folds live slots into the
// meter; with the dead process's stamp it would charge that memory from its death until now.
inline void forget_accrual(ProcessSlot& slot) {
  for (SlotDevice& sd : slot.devices) sd.accrued_ns.store(0);
}

}  // namespace slice
