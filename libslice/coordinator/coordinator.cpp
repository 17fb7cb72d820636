#include "coordinator.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "awake_bell.h"
#include "futex.h"
#include "usage_meter.h"

namespace slice {
namespace {

// The tenants sleeping on this entry's word (ComputeBoard::wait_for) look again: the word first,
// after the figures it announces, then the wake.
void announce_change_of_turns(DeviceEntry& entry) {
  entry.turn_seq.fetch_add(1, std::memory_order_release);
  futex_wake_all(&entry.turn_seq, true);
}

// Every live Coordinator of this process, for the fork handler.
std::mutex g_members_mu;
std::vector<Coordinator*>& members() {
  static std::vector<Coordinator*> v;
  return v;
}

void read_comm(char* out, std::size_t cap) {
  std::memset(out, 0, cap);
  int fd = ::open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, out, cap - 1);
  close(fd);
  if (n > 0 && out[n - 1] == '\n') out[n - 1] = '\0';
}

Limits limits_of(const JoinRequest& r, const std::vector<int>& entries) {
  Limits l{};
  for (std::uint64_t& m : l.memory_bytes) m = kNoLimit;
  for (std::size_t i = 0; i < r.devices.size(); ++i)
    l.memory_bytes[entries[i]] = cap_on(r.devices[i].memory, r.devices[i].total_bytes);
  l.compute_share = r.compute_share;
  for (std::size_t i = 0; i < r.devices.size(); ++i)
    l.compute_shares[entries[i]] = r.devices[i].compute_share.value_or(0);
  l.compute_limit = r.compute_limit;
  l.priority = stored_priority(r.priority);
  return l;
}

}  // namespace

int Coordinator::entry_for(const DeviceInfo& d, std::string& error) {
  TenantFile& f = tenant_->file();
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < kMaxDevices; ++i) {
      DeviceEntry& e = f.devices[i];
      std::uint32_t state = e.state.load();
      if (state == 2 && std::memcmp(e.uuid, d.uuid.data(), 16) == 0) return i;
      // Entries are claimed only under the initialisation lock, which the caller holds: one left
      // half-claimed (1) belongs to a process that died mid-claim, and is free again.
      if (pass == 1 && (state == 0 || state == 1) && e.state.compare_exchange_strong(state, 1)) {
        std::memcpy(e.uuid, d.uuid.data(), 16);
        std::snprintf(e.name, sizeof e.name, "%s", d.name.c_str());
        e.total_bytes = d.total_bytes;
        e.used.store(0);
        // The first process to meet a GPU registers the tenant's limit on it.
        f.header.registered.memory_bytes[i] = cap_on(d.memory, d.total_bytes);
        e.state.store(2);
        return i;
      }
    }
  }
  error = "tenant '" + tenant_->name() + "' already uses " + std::to_string(kMaxDevices) + " GPUs";
  return -1;
}

bool Coordinator::claim_slot(std::string& error) {
  TenantFile& f = tenant_->file();
  // First the slots marked free, then those a dead process left marked live. Trying every slot's
  // lock in order cost one system call per live process, each slower the more locks the file
  // has: 1024 processes starting together took over ten seconds, and some gave up on the lock.
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < kMaxProcesses; ++i) {
      if ((f.slots[i].state.load() == SlotState::free) != (pass == 0) || !tenant_->try_lock_slot(i)) continue;
      ProcessSlot& s = f.slots[i];
      forget_accrual(s);
      const bool stale = s.state.load() == SlotState::live;  // left by a process that died
      // Its memory is still in the tenant's totals: the recount after registration returns it,
      // and if that cannot finish, the flag makes the next refusal try again.
      if (stale) f.header.needs_recount.store(1);
      stale_slot_ = stale;
      slot_ = i;
      // What a dead owner may have left mid-change: changes under way it never finished would stall
      // every recount, and a recount it never finished would look like ours (slot + 1).
      for (SlotDevice& sd : s.devices)
        sd.flight.store(0), sd.compute.store(0), sd.overhead.store(0), sd.reconciled.store(0);
      // IPC exports a dead owner of this slot left would read as ours.
      for (auto& e : f.ipc_exports)
        if (std::uint64_t v = e.load(); v != 0 && static_cast<int>(v & 0x7FF) - 1 == i) e.compare_exchange_strong(v, 0);
      std::uint32_t dead_recounter = static_cast<std::uint32_t>(i + 1);
      f.header.recount_owner.compare_exchange_strong(dead_recounter, 0);
      ledger_ = std::make_unique<MemoryLedger>(*tenant_, slot_);
      // Zeroed as a change under way: a plain "under way" mark without looking for a recount let
      // a recount already running count the stale values and then keep them in the totals.
      ledger_->clear_slot();
      s.pid.store(static_cast<std::int32_t>(getpid()));
      s.started_ns.store(monotonic_ns());
      read_comm(s.comm, sizeof s.comm);
      s.state.store(SlotState::live);
      return true;
    }
  }
  error = "tenant '" + tenant_->name() + "' has no free process slot (" + std::to_string(kMaxProcesses) + " in use)";
  return false;
}

std::unique_ptr<Coordinator> Coordinator::join(const JoinRequest& r, std::string& error,
                                               std::vector<std::string>& warnings) {
  std::unique_ptr<Coordinator> c(new Coordinator());
  c->dir_ = r.dir;
  // A managed tenant's process first: it must not make the coordinator folder its own before the
  // boot step (slicectl prepare) has made it root's.
  if (!managed_tenant_file_ok(r.dir, r.policy_dir, r.tenant, error)) return nullptr;
  // An administrator's policy that cannot be read is a typo, never "no cap": the tenant's processes
  // do not start until it is fixed (issue 29: it failed open).
  if (Policy unused; read_policy(r.policy_dir, r.tenant, unused, error) == PolicyStatus::invalid) {
    error = "the administrator's policy for tenant '" + r.tenant + "' cannot be used (" + error +
            "): its processes do not start without the limits it sets; fix it, or rewrite it with slicectl set";
    return nullptr;
  }
  if (!prepare_coordinator_dir(r.dir, error)) return nullptr;
  c->tenant_ = TenantFileHandle::open(r.dir, r.tenant, TenantFileHandle::Mode::create, error);
  if (!c->tenant_) return nullptr;
  if (!c->tenant_->lock_init(2'000'000'000ull)) {
    error = "tenant '" + r.tenant + "': its registration lock was held for over 2 s";
    return nullptr;
  }
  // `slicectl rm` removes a file only under this lock and with no process in it: a file removed
  // between our open and our lock is left alone (joining it would split the tenant in two).
  for (int again = 0; again < 3 && !c->tenant_->linked(); ++again) {
    c->tenant_->unlock_init();
    c->tenant_ = TenantFileHandle::open(r.dir, r.tenant, TenantFileHandle::Mode::create, error);
    if (!c->tenant_) return nullptr;
    if (!c->tenant_->lock_init(2'000'000'000ull)) {
      error = "tenant '" + r.tenant + "': its registration lock was held for over 2 s";
      return nullptr;
    }
  }
  bool ok = c->claim_slot(error);
  for (std::size_t i = 0; ok && i < r.devices.size(); ++i) {
    int e = c->entry_for(r.devices[i], error);
    ok = e >= 0;
    // Only valid entries: the destructor (which runs when join fails) releases on each of them,
    // and a -1 there wrote through devices[-1] into the slot's and the header's fields.
    if (ok) c->entries_.push_back(e);
  }
  if (ok) {
    TenantHeader& h = c->tenant_->file().header;
    const Limits mine = limits_of(r, c->entries_);
    // Registration happens only under the initialisation lock, which we hold: a state other than
    // 2 (registered) is a first process that died while writing the limits (1), or none yet (0).
    // Either way this process registers them; a stuck 1 used to leave half-written limits (a
    // compute share of 0%) in force for good.
    std::uint32_t state = h.limits_state.load();
    if (state != 2 && h.limits_state.compare_exchange_strong(state, 1)) {
      Limits registered = mine;  // the first process of the tenant sets its limits
      // Keep the caps registered on GPUs this process does not use (met by the one that died).
      for (int e = 0; e < kMaxDevices; ++e)
        if (std::find(c->entries_.begin(), c->entries_.end(), e) == c->entries_.end()) {
          registered.memory_bytes[e] = h.registered.memory_bytes[e];
          registered.compute_shares[e] = h.registered.compute_shares[e];
        }
      h.registered = registered;
      h.limits_state.store(2);
    } else {
      // A later process with other values is told, and the registered values hold.
      for (std::size_t i = 0; i < r.devices.size(); ++i) {
        const std::uint64_t reg = h.registered.memory_bytes[c->entries_[i]];
        if (reg != mine.memory_bytes[c->entries_[i]])
          warnings.push_back("tenant '" + r.tenant + "' is registered with memory limit " + describe_bytes(reg) +
                             " on " + r.devices[i].name + "; this process asked for " +
                             describe_bytes(mine.memory_bytes[c->entries_[i]]) + ": the registered limit holds");
      }
      if (h.registered.compute_share != mine.compute_share)
        warnings.push_back("tenant '" + r.tenant + "' is registered with compute share " +
                           std::to_string(h.registered.compute_share) + "%; this process asked for " +
                           std::to_string(mine.compute_share) + "%: the registered share holds");
      if (h.registered.compute_limit != mine.compute_limit)
        warnings.push_back("tenant '" + r.tenant + "' is registered with compute limit " +
                           std::to_string(h.registered.compute_limit) + "%; this process asked for " +
                           std::to_string(mine.compute_limit) + "%: the registered limit holds");
      if (h.registered.priority != mine.priority)
        warnings.push_back("tenant '" + r.tenant + "' is registered with priority " +
                           std::string(to_string(priority_from_stored(h.registered.priority))) +
                           "; this process asked for " + std::string(to_string(r.priority)) +
                           ": the registered priority holds");
    }
  }
  c->tenant_->unlock_init();
  {
    static std::once_flag once;
    std::call_once(once, [] { pthread_atfork(nullptr, nullptr, Coordinator::on_fork_child); });
    std::lock_guard<std::mutex> lk(g_members_mu);
    if (ok) members().push_back(c.get());
  }
  // Outside the registration lock: a recount may wait for other processes' changes.
  if (ok && c->stale_slot_) c->ledger_->recount();
  if (!ok) return nullptr;
  c->policy_dir_ = r.policy_dir;
  c->policy_.open(r.policy_dir);
  c->cap_count_ = r.devices.size();
  c->compute_shares_ = std::make_unique<std::atomic<std::uint32_t>[]>(std::max<std::size_t>(c->cap_count_, 1));
  for (std::size_t i = 0; i < c->cap_count_; ++i) c->compute_shares_[i].store(100);
  c->caps_ = std::make_unique<std::atomic<std::uint64_t>[]>(std::max<std::size_t>(c->cap_count_, 1));
  for (std::size_t i = 0; i < c->cap_count_; ++i) c->caps_[i].store(kNoLimit);
  for (const DeviceInfo& d : r.devices) {
    c->device_totals_.push_back(d.total_bytes);
    c->device_uuids_.push_back(d.uuid);
  }
  c->refresh_policy();
  // Settings first, then the stamp: a reader that sees the stamp sees this tenant's priority.
  const std::uint32_t stamp = joined_stamp_ms(monotonic_ns());
  for (std::size_t i = 0; i < c->cap_count_; ++i) {
    c->publish_compute_settings(static_cast<int>(i));
    c->device_entry(static_cast<int>(i)).joined_ms.store(stamp, std::memory_order_release);
  }
  // A new process of a tenant the others let rest (its file is not new, so their listing does not
  // change): they read it at their next look, and see it joined.
  ring_awake_bell(c->dir_);
  return c;
}

void Coordinator::on_fork_child() {
  // Only the forking thread runs in the child: no lock needed. Another thread may have held the
  // lock at the fork, and it would never be released here: start the child with a fresh one.
  new (&g_members_mu) std::mutex();
  for (Coordinator* c : members()) {
    c->forked_ = true;
    c->tenant_->forget_after_fork();
  }
  members().clear();
}

void Coordinator::refresh_policy(std::uint64_t now_ns) {
  const std::uint64_t generation = policy_.generation(now_ns);
  if (policy_read_.load(std::memory_order_acquire) && generation == policy_generation_.load(std::memory_order_acquire))
    return;  // the common case: two loads here, one or two in the watcher
  reread_policy();
}

void Coordinator::reread_policy() {
  std::lock_guard<std::mutex> lock(policy_mu_);
  const std::uint64_t generation = policy_.generation();
  if (policy_read_.load() && generation == policy_generation_.load()) return;  // another thread did it
  const TenantFile& f = tenant_->file();
  Policy p;
  std::string message;
  const PolicyStatus status = read_policy(policy_dir_, tenant_->name(), p, message);
  if (status == PolicyStatus::invalid && policy_read_.load()) {
    // Spoiled while the tenant runs: the limits last read stay in force until it is fixed.
    policy_generation_.store(generation, std::memory_order_release);
    return;
  }
  const bool have = status == PolicyStatus::ok;
  const std::uint32_t limit = have && p.compute_limit ? *p.compute_limit : f.header.registered.compute_limit;
  const Priority priority = have && p.priority ? *p.priority : priority_from_stored(f.header.registered.priority);
  compute_limit_.store(valid_percent(limit));
  compute_priority_.store(stored_priority(priority));
  for (std::size_t i = 0; i < cap_count_; ++i) {
    std::uint64_t cap = f.header.registered.memory_bytes[entries_[i]];
    // The administrator's word wins over anything a tenant registered. The GPU is the one the driver
    // named (never the UUID in the tenant's own, writable, file), and a percentage is of the size the
    // driver reports.
    if (have)
      if (const auto w = p.memory_for(device_uuids_[i].data())) cap = w->bytes_on(device_totals_[i]);
    caps_[i].store(cap);
    // The share: the administrator's, else what was registered for this GPU, else for all.
    const std::uint32_t per_gpu = f.header.registered.compute_shares[entries_[i]];
    const std::uint32_t share = have && p.compute_share ? *p.compute_share
                                : per_gpu != 0          ? per_gpu
                                                        : f.header.registered.compute_share;
    compute_shares_[i].store(valid_percent(share));
  }
  policy_generation_.store(generation, std::memory_order_release);
  policy_read_.store(true, std::memory_order_release);
}

Coordinator::ComputeSettings Coordinator::compute(int device) {
  if (!forked_) refresh_policy();
  return {compute_shares_[device].load(std::memory_order_relaxed), compute_limit_.load(std::memory_order_relaxed),
          priority_from_stored(compute_priority_.load(std::memory_order_relaxed))};
}

Coordinator::ComputeSettings Coordinator::publish_compute_settings(int device) {
  const ComputeSettings s = compute(device);
  DeviceEntry& e = device_entry(device);
  e.compute_share.store(s.share, std::memory_order_relaxed);
  e.compute_limit.store(s.limit, std::memory_order_relaxed);
  e.compute_priority.store(stored_priority(s.priority), std::memory_order_relaxed);
  return s;
}

std::uint64_t Coordinator::cap(int device) {
  if (forked_) return 0;
  refresh_policy();
  return caps_[device].load(std::memory_order_relaxed);
}

bool Coordinator::reserve(int device, std::uint64_t bytes, Refusal* why) {
  if (forked_) {  // a forked child is no member: its parent's slot is not its to charge
    if (why) *why = Refusal{0, 0};
    return false;
  }
  // One coarse clock read for both the policy's look-up (without a policy folder) and metering.
  const std::uint64_t now = coarse_monotonic_ns();
  refresh_policy(now);                                     // one load unless an administrator changed a policy
  if (left_.load(std::memory_order_relaxed)) return true;  // exiting: the slot is gone, nothing is charged
  return ledger_->reserve(entries_[device], bytes, caps_[device].load(std::memory_order_relaxed), why, now);
}

void Coordinator::release(int device, std::uint64_t bytes) {
  if (!forked_ && !left_.load(std::memory_order_relaxed)) ledger_->release(entries_[device], bytes);
}

void Coordinator::charge_unchecked(int device, std::uint64_t bytes) {
  if (!forked_ && !left_.load(std::memory_order_relaxed)) ledger_->add_unchecked(entries_[device], bytes);
}

std::uint64_t Coordinator::usage_without_dead(int device) {
  if (forked_) return 0;
  if (ledger_->any_dead_slot()) ledger_->recount();
  return ledger_->usage(entries_[device]);
}

namespace {
std::uint64_t ipc_entry(std::uint64_t digest, int slot) {
  return (digest << 11) | static_cast<std::uint64_t>(slot + 1);
}
constexpr std::uint64_t kIpcDigestMask = ~0ull >> 11;
}  // namespace

bool Coordinator::note_ipc_export(std::uint64_t digest) {
  if (forked_) return true;
  auto& table = tenant_->file().ipc_exports;
  const std::uint64_t mine = ipc_entry(digest, slot_);
  const std::size_t home = static_cast<std::size_t>((digest & kIpcDigestMask) % kIpcExports);
  for (int i = 0; i < kIpcProbe; ++i) {
    if (table[(home + i) % kIpcExports].load() == mine) return true;  // exported before
  }
  for (int i = 0; i < kIpcProbe; ++i) {
    auto& e = table[(home + i) % kIpcExports];
    std::uint64_t seen = e.load();
    const int owner = static_cast<int>(seen & 0x7FF) - 1;
    // Free: empty, or left by a process that is gone. Never another export that is still live.
    const bool free =
        seen == 0 || owner < 0 || owner >= kMaxProcesses || (owner != slot_ && !tenant_->slot_held_by_other(owner));
    if (free && e.compare_exchange_strong(seen, mine)) return true;
  }
  return false;  // full around its home: an open of it is charged once more (safe, never less)
}

void Coordinator::withdraw_ipc_export(std::uint64_t digest) {
  if (forked_) return;
  auto& table = tenant_->file().ipc_exports;
  std::uint64_t mine = ipc_entry(digest, slot_);
  const std::size_t home = static_cast<std::size_t>((digest & kIpcDigestMask) % kIpcExports);
  for (int i = 0; i < kIpcProbe; ++i) {
    std::uint64_t expected = mine;
    table[(home + i) % kIpcExports].compare_exchange_strong(expected, 0);
  }
}

bool Coordinator::ipc_exported_by_tenant(std::uint64_t digest) const {
  if (forked_) return false;
  const auto& table = tenant_->file().ipc_exports;
  const std::size_t home = static_cast<std::size_t>((digest & kIpcDigestMask) % kIpcExports);
  const std::uint64_t wanted = digest & kIpcDigestMask;
  for (int i = 0; i < kIpcProbe; ++i) {  // every entry of the window: withdrawals leave holes
    const std::uint64_t e = table[(home + i) % kIpcExports].load();
    if (e == 0 || (e >> 11) != wanted) continue;
    const int owner = static_cast<int>(e & 0x7FF) - 1;
    if (owner >= 0 && owner < kMaxProcesses && (owner == slot_ || tenant_->slot_held_by_other(owner))) return true;
  }
  return false;
}

void Coordinator::publish_compute_locked_out(int device) {
  TenantFile& f = tenant_->file();
  const int e = entries_[device];
  f.slots[slot_].devices[e].compute.store(0);
  std::uint32_t active = 0, wanting = 0;
  for (int i = 0; i < compute_scan_limit_.load(std::memory_order_relaxed); ++i) {
    if (i == slot_ || f.slots[i].state.load(std::memory_order_relaxed) != SlotState::live) continue;
    const std::uint32_t bits = f.slots[i].devices[e].compute.load(std::memory_order_relaxed);
    active += (bits & kSlotActive) != 0;
    wanting += (bits & kSlotWanting) != 0;
  }
  DeviceEntry& entry = f.devices[e];
  // Both counts are stored whatever the first was (no short circuit between the two exchanges).
  const std::uint32_t was_active = entry.active_processes.exchange(active);
  const std::uint32_t was_wanting = entry.wanting_processes.exchange(wanting);
  if ((was_active != 0 || was_wanting != 0) != (active != 0 || wanting != 0))
    announce_change_of_turns(entry);  // a tenant waiting for the device is woken at once
}

void Coordinator::publish_compute(int device, std::uint32_t flags, bool check_liveness, bool held) {
  if (forked_ || left_.load(std::memory_order_relaxed)) return;
  TenantFile& f = tenant_->file();
  const int e = entries_[device];
  f.slots[slot_].devices[e].compute.store(flags, std::memory_order_relaxed);
  std::uint32_t active = 0, wanting = 0;
  const int limit = check_liveness ? kMaxProcesses : compute_scan_limit_.load(std::memory_order_relaxed);
  int highest = slot_;
  for (int i = 0; i < limit; ++i) {
    if (check_liveness && f.slots[i].state.load(std::memory_order_relaxed) == SlotState::live)
      highest = std::max(highest, i);
    SlotDevice& sd = f.slots[i].devices[e];
    std::uint32_t bits = sd.compute.load(std::memory_order_relaxed);
    if (bits == 0) continue;
    if (i != slot_ &&
        (f.slots[i].state.load() != SlotState::live || (check_liveness && !tenant_->slot_held_by_other(i)))) {
      sd.compute.compare_exchange_strong(bits, 0);  // its process is gone
      continue;
    }
    active += (bits & kSlotActive) != 0;
    wanting += (bits & kSlotWanting) != 0;
  }
  if (check_liveness) compute_scan_limit_.store(highest + 1, std::memory_order_relaxed);
  DeviceEntry& entry = f.devices[e];
  const std::uint32_t was_active = entry.active_processes.exchange(active, std::memory_order_relaxed);
  const std::uint32_t was_wanting = entry.wanting_processes.exchange(wanting, std::memory_order_relaxed);
  const bool wants = active != 0 || wanting != 0, wanted = was_active != 0 || was_wanting != 0;
  if (active == 0) entry.drain_eta_ns.store(0, std::memory_order_relaxed);  // nothing left to wait for
  if (wants != wanted || (held && (active != 0) != (was_active != 0))) {
    // Who waits for the device sleeps on this word until the tenant stops (or starts) wanting it, or
    // its work ends as it yields: wake them (compute_board.h). Only then, so a busy tenant makes no
    // system call here, even as its short queue drains and fills.
    announce_change_of_turns(entry);
  }
  meter_tick(*tenant_, slot_, e, monotonic_ns());  // metering: memory held without changes, hourly samples
}

void Coordinator::yield_compute(int device, std::uint64_t drain_eta_ns) {
  if (forked_ || left_.load(std::memory_order_relaxed)) return;
  DeviceEntry& entry = tenant_->file().devices[entries_[device]];
  entry.drain_eta_ns.store(drain_eta_ns, std::memory_order_relaxed);
  announce_change_of_turns(entry);
}

std::vector<std::int32_t> Coordinator::live_pids() const {
  std::vector<std::int32_t> pids;
  if (forked_) return pids;
  for (const ProcessSlot& slot : tenant_->file().slots)
    if (slot.state.load() == SlotState::live) pids.push_back(slot.pid.load());
  return pids;
}

std::uint64_t Coordinator::mine(int device) const { return forked_ ? 0 : ledger_->mine(entries_[device]); }

void Coordinator::set_overhead(int device, std::uint64_t bytes, bool measurable) {
  if (forked_ || left_.load(std::memory_order_relaxed)) return;
  SlotDevice& sd = tenant_->file().slots[slot_].devices[entries_[device]];
  if (!measurable) {
    sd.reconciled.store(kReconciledUnmeasurable, std::memory_order_relaxed);
    return;
  }
  const std::uint64_t old = sd.overhead.load(std::memory_order_relaxed);
  if (bytes > old)
    ledger_->add_unchecked(entries_[device], bytes - old);
  else if (bytes < old)
    ledger_->release(entries_[device], old - bytes);
  sd.overhead.store(bytes, std::memory_order_relaxed);
  sd.reconciled.store(kReconciledMeasured, std::memory_order_relaxed);
}

std::uint64_t Coordinator::overhead(int device) const {
  return forked_ ? 0 : tenant_->file().slots[slot_].devices[entries_[device]].overhead.load(std::memory_order_relaxed);
}

std::uint64_t Coordinator::usage(int device) const { return forked_ ? 0 : ledger_->usage(entries_[device]); }

Coordinator::~Coordinator() {
  {
    std::lock_guard<std::mutex> lk(g_members_mu);
    std::erase(members(), this);
  }
  leave();
}

void Coordinator::leave() {
  // In a forked child there is nothing of ours to leave (the slot is the parent's).
  if (forked_ || left_.exchange(true) || slot_ < 0 || !tenant_) return;
  // Give back what this process holds, then the slot itself.
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const std::uint64_t held = ledger_->mine(entries_[i]);
    if (held) ledger_->release(entries_[i], held);
  }
  // Off the device for the others at once (not when the heartbeats go stale): the tenant's counts
  // without this process.
  for (std::size_t i = 0; i < entries_.size(); ++i) publish_compute_locked_out(static_cast<int>(i));
  ProcessSlot& s = tenant_->file().slots[slot_];
  s.pid.store(0);
  s.state.store(SlotState::free);
  tenant_->unlock_slot(slot_);
}

}  // namespace slice
