#include "usage_meter.h"

#include <time.h>

#include <limits>

#include "tenant_file.h"

namespace slice {

namespace {

constexpr std::uint64_t kUnitMask = (std::uint64_t{1} << kMemoryUnitShift) - 1;
constexpr std::uint64_t kSecondNs = 1'000'000'000;
constexpr std::uint64_t kTickAccrualNs = kSecondNs;  // meter_tick integrates at most this often

// Folds the memory of every live process of the tenant into the meter, so that a sample is the
// totals at its time (a process that never changes its memory would otherwise lag behind).
void accrue_live_slots(TenantFileHandle& tenant, int self, int entry, std::uint64_t now_ns) {
  TenantFile& f = tenant.file();
  for (int i = 0; i < kMaxProcesses; ++i) {
    ProcessSlot& s = f.slots[i];
    if (s.state.load(std::memory_order_relaxed) != SlotState::live) continue;
    SlotDevice& sd = s.devices[entry];
    if (sd.used.load(std::memory_order_relaxed) == 0) continue;
    // A dead process's memory is never charged past its death (its last integration).
    if (i != self && !tenant.slot_held_by_other(i)) continue;
    accrue_slot(f.usage[entry].memory, sd, now_ns);
  }
}

void sample_now(TenantFileHandle& tenant, int slot, int entry, std::uint64_t now_ns) {
  TenantFile& f = tenant.file();
  accrue_live_slots(tenant, slot, entry, now_ns);
  record_usage_sample(f.usage[entry], f.devices[entry].received_ns.load(std::memory_order_relaxed), now_ns,
                      wall_clock_ms());
}

}  // namespace

void add_memory(MemoryMeter& meter, ByteNs amount) {
  const ByteNs whole = amount >> kMemoryUnitShift;
  const auto part = static_cast<std::uint64_t>(amount & kUnitMask);
  if (whole != 0) {
    constexpr auto most = std::numeric_limits<std::uint64_t>::max();  // only a corrupted file gets here
    meter.units.fetch_add(whole > most ? most : static_cast<std::uint64_t>(whole), std::memory_order_relaxed);
  }
  if (part == 0) return;
  // The boundary of a unit this addition crossed is this adder's to carry: fetch_add gives every
  // adder its own stretch of the counter, so each boundary is carried exactly once.
  const std::uint64_t before = meter.fraction.fetch_add(part, std::memory_order_relaxed);
  if (((before & kUnitMask) + part) >> kMemoryUnitShift) meter.units.fetch_add(1, std::memory_order_relaxed);
}

ByteNs metered_memory(const MemoryMeter& meter) {
  return (ByteNs{meter.units.load(std::memory_order_relaxed)} << kMemoryUnitShift) +
         (meter.fraction.load(std::memory_order_relaxed) & kUnitMask);
}

void accrue_slot(MemoryMeter& meter, SlotDevice& slot, std::uint64_t now_ns) {
  std::uint64_t last = slot.accrued_ns.load();
  for (;;) {
    const bool restart = last == 0 || last > now_ns + kClockRestartNs;
    if (!restart && last >= now_ns) return;  // integrated up to now already
    if (slot.accrued_ns.compare_exchange_weak(last, now_ns)) {
      if (restart) return;  // nothing known before: count from now
      break;
    }
  }
  // The interval [last, now) is ours alone; `used` is read after claiming it, before the caller
  // changes it.
  const std::uint64_t used = slot.used.load(std::memory_order_relaxed);
  if (used != 0) add_memory(meter, ByteNs{used} * (now_ns - last));
}

ByteNs pending_memory(const SlotDevice& slot, std::uint64_t now_ns) {
  const std::uint64_t last = slot.accrued_ns.load(std::memory_order_relaxed);
  if (last == 0 || last >= now_ns) return 0;
  return ByteNs{slot.used.load(std::memory_order_relaxed)} * (now_ns - last);
}

bool record_usage_sample(UsageRecord& record, std::uint64_t device_ns, std::uint64_t now_ns, std::uint64_t wall_ms) {
  constexpr std::uint64_t step_ms = kUsageStepSeconds * 1000;
  const std::uint64_t step = wall_ms / step_ms;
  record.memory.next_sample_ns.store(now_ns + ((step + 1) * step_ms - wall_ms) * 1'000'000, std::memory_order_relaxed);
  std::uint64_t seen = record.newest_step.load();
  // One writer per hour; a clock set back waits until it is past the newest sample again.
  if (step == 0 || step <= seen || !record.newest_step.compare_exchange_strong(seen, step)) return false;
  std::uint64_t never = 0;
  record.first_wall_ms.compare_exchange_strong(never, wall_ms);
  // The time last: a reader takes a sample only with its time set, and one this process did not
  // finish (it died) stays 0 and is skipped.
  UsageSample& s = record.samples[step % kUsageSamples];
  s.wall_ms.store(0);
  s.device_ns.store(device_ns);
  s.memory_units.store(record.memory.units.load());
  s.wall_ms.store(wall_ms);
  return true;
}

void meter_change(TenantFileHandle& tenant, int slot, int entry, std::uint64_t now_ns) {
  TenantFile& f = tenant.file();
  accrue_slot(f.usage[entry].memory, f.slots[slot].devices[entry], now_ns);
  if (usage_sample_due(f.usage[entry], now_ns)) sample_now(tenant, slot, entry, now_ns);
}

void meter_tick(TenantFileHandle& tenant, int slot, int entry, std::uint64_t now_ns) {
  TenantFile& f = tenant.file();
  SlotDevice& mine = f.slots[slot].devices[entry];
  if (mine.used.load(std::memory_order_relaxed) != 0 &&
      now_ns >= mine.accrued_ns.load(std::memory_order_relaxed) + kTickAccrualNs)
    accrue_slot(f.usage[entry].memory, mine, now_ns);
  if (usage_sample_due(f.usage[entry], now_ns)) sample_now(tenant, slot, entry, now_ns);
}

std::uint64_t wall_clock_ms() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::uint64_t(ts.tv_sec) * 1000 + std::uint64_t(ts.tv_nsec) / 1'000'000;
}

}  // namespace slice
