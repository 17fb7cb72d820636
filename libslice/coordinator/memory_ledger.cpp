#include "memory_ledger.h"

#include <array>

#include <unistd.h>

#include "usage_meter.h"

namespace slice {

namespace {
constexpr std::uint64_t kRecountWaitNs = 1'000'000'000;  // longest a change waits behind a recount
constexpr std::uint64_t kFlightWaitNs = 200'000'000;     // longest a recount waits for one change
}  // namespace

bool MemoryLedger::begin_change(int device) {
  // Announce the change before looking for a recount, and a recounter announces itself before
  // looking at changes (both sequentially consistent): one of the two always sees the other. A
  // count, not a flag: several threads of this process may be changing at once.
  SlotDevice& mine = tenant_.file().slots[slot_].devices[device];
  mine.flight.fetch_add(1);
  if (tenant_.file().header.recount_owner.load() == 0) return true;
  mine.flight.fetch_sub(1);
  return false;
}

void MemoryLedger::begin_change_by_deadline(int device) {
  if (!begin_change(device)) begin_change_after_recount(device);
}

void MemoryLedger::begin_change_after_recount(int device) {
  // Waits for a recount at most the deadline, then goes ahead announced anyway: a recount still
  // under way then waits for this change, or finds the total changed and gives up. The clock is
  // read only here, when there is a recount to wait for.
  const std::uint64_t deadline = monotonic_ns() + kRecountWaitNs;
  do {
    if (!wait_for_recount(deadline)) {
      tenant_.file().slots[slot_].devices[device].flight.fetch_add(1);
      return;
    }
  } while (!begin_change(device));
}

void MemoryLedger::end_change(int device) { tenant_.file().slots[slot_].devices[device].flight.fetch_sub(1); }

bool MemoryLedger::wait_for_recount(std::uint64_t deadline) {
  auto& owner = tenant_.file().header.recount_owner;
  for (std::uint32_t o; (o = owner.load()) != 0;) {
    // A recounter that died leaves the flag set: a recount is idempotent, so just clear it. A live
    // one (another thread of ours too) is never robbed of it: its totals would overwrite ours.
    const bool alive = o <= kMaxProcesses && (o - 1 == static_cast<std::uint32_t>(slot_) ||
                                              tenant_.slot_held_by_other(static_cast<int>(o - 1)));
    if (!alive) {
      owner.compare_exchange_strong(o, 0);
      continue;
    }
    if (monotonic_ns() > deadline) return false;
    usleep(50);
  }
  return true;
}

bool MemoryLedger::reserve(int device, std::uint64_t bytes, std::uint64_t cap, Refusal* why, std::uint64_t now_ns) {
  // The common case in one pass: no recount under way, and the bytes fit. No clock is read but the
  // coarse one for metering, and that only when the caller has not.
  if (begin_change(device)) {
    meter_before_change(tenant_, slot_, device,
                        now_ns != 0 ? now_ns : coarse_monotonic_ns());  // the memory held until now, charged
    DeviceEntry& d = tenant_.file().devices[device];
    std::uint64_t used = d.used.load();
    while (used <= cap && bytes <= cap - used) {
      if (d.used.compare_exchange_weak(used, used + bytes)) {
        tenant_.file().slots[slot_].devices[device].used.fetch_add(bytes);
        end_change(device);
        return true;
      }
    }
    end_change(device);
  }
  return reserve_patiently(device, bytes, cap, why);
}

bool MemoryLedger::reserve_patiently(int device, std::uint64_t bytes, std::uint64_t cap, Refusal* why) {
  DeviceEntry& d = tenant_.file().devices[device];
  const std::uint64_t deadline = monotonic_ns() + kRecountWaitNs;
  for (int attempt = 0;; ++attempt) {
    while (!begin_change(device)) {
      if (!wait_for_recount(deadline)) {  // a recounter stopped for over a second: refuse, safely
        if (why) *why = Refusal{d.used.load(), cap};
        return false;
      }
    }
    meter_before_change(tenant_, slot_, device, coarse_monotonic_ns());
    std::uint64_t used = d.used.load();
    bool fits;
    do {
      fits = used <= cap && bytes <= cap - used;
    } while (fits && !d.used.compare_exchange_weak(used, used + bytes));
    if (fits) {
      tenant_.file().slots[slot_].devices[device].used.fetch_add(bytes);
      end_change(device);
      return true;
    }
    end_change(device);
    // Before refusing, make sure the memory of processes that died is not still counted.
    if (attempt == 0 && (tenant_.file().header.needs_recount.load() != 0 || any_dead_slot())) {
      recount();  // ours, or one another process was already doing: either way, try once more
      continue;
    }
    if (why) *why = Refusal{used, cap};
    return false;
  }
}

void MemoryLedger::release(int device, std::uint64_t bytes) {
  DeviceEntry& d = tenant_.file().devices[device];
  SlotDevice& mine = tenant_.file().slots[slot_].devices[device];
  // Giving back never passes a cap: past the deadline it goes ahead.
  begin_change_by_deadline(device);
  meter_before_change(tenant_, slot_, device, coarse_monotonic_ns());
  // Never give back more than this process holds, even with threads racing on a double free: a
  // double free must not free others' usage.
  std::uint64_t held = mine.used.load(), give;
  do {
    give = bytes <= held ? bytes : held;
  } while (!mine.used.compare_exchange_weak(held, held - give));
  std::uint64_t used = d.used.load();
  while (!d.used.compare_exchange_weak(used, used >= give ? used - give : 0)) {
  }
  end_change(device);
}

void MemoryLedger::add_unchecked(int device, std::uint64_t bytes) {
  begin_change_by_deadline(device);
  meter_before_change(tenant_, slot_, device, coarse_monotonic_ns());
  tenant_.file().devices[device].used.fetch_add(bytes);
  tenant_.file().slots[slot_].devices[device].used.fetch_add(bytes);
  end_change(device);
}

bool MemoryLedger::any_dead_slot() const {
  const TenantFile& f = tenant_.file();
  for (int i = 0; i < kMaxProcesses; ++i)
    if (i != slot_ && f.slots[i].state.load() == SlotState::live && !tenant_.slot_held_by_other(i)) return true;
  return false;
}

void MemoryLedger::clear_slot() {
  // Announced like any change, so a recount neither counts the stale values nor misses their
  // clearing.
  begin_change_by_deadline(0);
  // What a dead owner held is not ours to be charged for: integration starts again from nothing.
  for (SlotDevice& sd : tenant_.file().slots[slot_].devices) sd.accrued_ns.store(0), sd.used.store(0);
  end_change(0);
}

int MemoryLedger::recount() {
  TenantFile& f = tenant_.file();
  const std::uint32_t me = static_cast<std::uint32_t>(slot_ + 1);
  // Someone else is recounting: wait for it (at most the documented second), then recount once
  // more. Giving up at once left a flag that a dead recounter had set to fail every reap (and the
  // refusal that found it) although wait_for_recount had just cleared it; a recount is idempotent.
  const std::uint64_t deadline = monotonic_ns() + kRecountWaitNs;
  for (int attempt = 0;; ++attempt) {
    std::uint32_t expected = 0;
    if (f.header.recount_owner.compare_exchange_strong(expected, me)) break;
    if (attempt == 1 || !wait_for_recount(deadline)) return -1;  // others keep recounting: as good as ours
  }
  // Which slots are live: ours, and those a live process holds.
  std::array<bool, kMaxProcesses> live{};  // on the stack: libslice.so keeps its thread-local storage small
  for (int i = 0; i < kMaxProcesses; ++i)
    live[i] = f.slots[i].state.load() == SlotState::live && (i == slot_ || tenant_.slot_held_by_other(i));
  // Let the changes already under way finish (our own other threads' too); new ones wait for us.
  auto give_up = [&] {
    f.header.needs_recount.store(1);  // the next refusal tries again
    std::uint32_t mine = me;
    f.header.recount_owner.compare_exchange_strong(mine, 0);
    return -1;
  };
  for (int i = 0; i < kMaxProcesses; ++i) {
    if (!live[i]) continue;
    for (SlotDevice& sd : f.slots[i].devices) {
      const std::uint64_t flight_deadline = monotonic_ns() + kFlightWaitNs;
      while (sd.flight.load() != 0) {
        if (monotonic_ns() > flight_deadline) return give_up();  // a stopped process: change nothing
        usleep(20);
      }
    }
  }
  // No change can be under way now, unless we were stopped for longer than waiters wait (then they
  // take the flag from us and go on). So replace each total only if it is still what it was here:
  // a plain store would overwrite the changes made since, and let the tenant pass its cap.
  std::uint64_t before[kMaxDevices];
  for (int d = 0; d < kMaxDevices; ++d) before[d] = f.devices[d].used.load();
  for (int d = 0; d < kMaxDevices; ++d) {
    std::uint64_t sum = 0;
    for (int i = 0; i < kMaxProcesses; ++i)
      if (live[i]) sum += f.slots[i].devices[d].used.load();
    if (f.header.recount_owner.load() != me || !f.devices[d].used.compare_exchange_strong(before[d], sum))
      return give_up();
  }
  int freed = 0;
  for (int i = 0; i < kMaxProcesses; ++i) {
    if (live[i] || f.slots[i].state.load() != SlotState::live) continue;
    // Take the dead slot's lock while clearing it, so a newcomer cannot claim it half-cleared.
    if (!tenant_.try_lock_slot(i)) continue;
    forget_accrual(f.slots[i]);
    for (SlotDevice& sd : f.slots[i].devices) sd.used.store(0), sd.flight.store(0);
    f.slots[i].pid.store(0);
    f.slots[i].state.store(SlotState::free);
    tenant_.unlock_slot(i);
    ++freed;
  }
  f.header.needs_recount.store(0);
  f.header.recounts.fetch_add(1);
  std::uint32_t mine = me;
  f.header.recount_owner.compare_exchange_strong(mine, 0);  // not another's, if it was taken from us
  return freed;
}

std::uint64_t MemoryLedger::usage(int device) const { return tenant_.file().devices[device].used.load(); }
std::uint64_t MemoryLedger::mine(int device) const { return tenant_.file().slots[slot_].devices[device].used.load(); }

}  // namespace slice
