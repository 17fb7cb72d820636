#include "coordinator_view.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "compute_board.h"
#include "memory_ledger.h"
#include "limits_text.h"
#include "policy.h"
#include "tenant_file.h"
#include "usage_meter.h"

namespace slice {

namespace {

constexpr std::uint64_t kSecondNs = 1'000'000'000;

std::string bounded(const char* s, std::size_t cap) { return std::string(s, strnlen(s, cap)); }

// `now_ns`: when the snapshot `h` was taken (the monotonic clock, as the scheduler's).
TenantView view_of(const std::string& policy_dir, const TenantFileHandle& h, std::uint64_t now_ns,
                   std::uint64_t wall_ms) {
  const TenantFile& f = h.file();
  TenantView v;
  v.name = h.name();
  v.read_wall_ms = wall_ms;
  Policy policy;
  std::string message;
  const PolicyStatus status = read_policy(policy_dir, v.name, policy, message);
  v.policy = status == PolicyStatus::ok;
  if (status == PolicyStatus::untrusted || status == PolicyStatus::invalid) v.policy_problem = message;
  const Limits& reg = f.header.registered;
  // As Coordinator::compute() takes them (what the tenant's processes publish in each DeviceEntry
  // and schedule by): the policy's value, else the registered one, clamped to 1-100. Before a
  // process has registered any, the registered fields are zero and mean nothing: the defaults.
  const bool registered = f.header.limits_state.load() == 2;
  const Policy none;
  const Policy& p = v.policy ? policy : none;
  v.priority = p.priority.value_or(registered ? priority_from_stored(reg.priority) : Priority::normal);
  v.compute_share = valid_percent(p.compute_share.value_or(registered ? reg.compute_share : 100));
  v.compute_limit = valid_percent(p.compute_limit.value_or(registered ? reg.compute_limit : 100));
  std::vector<int> entries;
  std::vector<ByteNs> metered;  // per GPU of the view: memory byte-ns, the live processes' added below
  for (int d = 0; d < kMaxDevices; ++d) {
    const DeviceEntry& e = f.devices[d];
    if (e.state.load() != 2) continue;
    entries.push_back(d);
    TenantGpuView g;
    g.uuid = uuid_text(e.uuid);
    g.name = bounded(e.name, sizeof e.name);
    g.total_bytes = e.total_bytes;
    g.cap_bytes = registered ? reg.memory_bytes[d] : kNoLimit;
    if (v.policy) {
      if (const auto w = policy.memory_for(e.uuid)) g.cap_bytes = w->bytes_on(e.total_bytes);
    }
    // The share: the administrator's, else what was registered for this GPU, else for all.
    const std::uint32_t per_gpu = registered ? reg.compute_shares[d] : 0;
    g.compute_share = p.compute_share ? v.compute_share : per_gpu != 0 ? valid_percent(per_gpu) : v.compute_share;
    g.received_ns = e.received_ns.load();
    g.compute_used_1s = compute_used(f.history[d], g.received_ns, now_ns, kSecondNs);
    g.compute_used_10s = compute_used(f.history[d], g.received_ns, now_ns, 10 * kSecondNs);
    g.device_ns_total = g.received_ns;
    g.usage_started_ms = f.usage[d].first_wall_ms.load();
    v.gpus.push_back(g);
    metered.push_back(metered_memory(f.usage[d].memory));
  }
  // Usage from the live processes alone: a dead process's memory is already back for any reader.
  for (int i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = f.slots[i];
    if (s.state.load() != SlotState::live) continue;
    if (!h.slot_held_by_other(i)) {
      ++v.dead_processes;
      continue;
    }
    ProcessView p;
    p.pid = s.pid.load();
    p.comm = bounded(s.comm, sizeof s.comm);
    for (std::size_t g = 0; g < entries.size(); ++g) {
      const SlotDevice& sd = s.devices[entries[g]];
      const std::uint64_t used = sd.used.load();
      p.memory_used.push_back(used);
      v.gpus[g].used_bytes += used;
      const std::uint32_t state = sd.reconciled.load();
      const Reconciled r = state == kReconciledMeasured       ? Reconciled::measured
                           : state == kReconciledUnmeasurable ? Reconciled::unmeasurable
                                                              : Reconciled::never;
      const std::uint64_t overhead = r == Reconciled::measured ? std::min(sd.overhead.load(), used) : 0;
      p.memory_overhead.push_back(overhead);
      p.reconciled.push_back(r);
      v.gpus[g].overhead_bytes += overhead;
      if (r == Reconciled::measured || (r == Reconciled::unmeasurable && v.gpus[g].reconciled == Reconciled::never))
        v.gpus[g].reconciled = r;
      metered[g] += pending_memory(s.devices[entries[g]], now_ns);  // held since its last change
    }
    v.processes.push_back(p);
  }
  for (std::size_t g = 0; g < entries.size(); ++g) {
    TenantGpuView& gpu = v.gpus[g];
    gpu.memory_byte_seconds_total = byte_seconds(metered[g]);
    gpu.usage_samples = usage_samples(f.usage[entries[g]], gpu.usage_now(wall_ms));
  }
  return v;
}

}  // namespace

std::optional<double> compute_used(const ReceivedHistory& history, std::uint64_t received_ns, std::uint64_t now_ns,
                                   std::uint64_t window_ns) {
  if (history.step.load() == 0 || window_ns == 0) return std::nullopt;  // no sample yet
  // The scheduler's own figure (what it decides on: min(received_over, window)), as a share.
  const std::uint64_t received = std::min(received_over(history, received_ns, now_ns, window_ns), window_ns);
  return std::clamp(static_cast<double>(received) / static_cast<double>(window_ns), 0.0, 1.0);
}

std::vector<TenantView> read_coordinator(const std::string& dir, const std::string& policy_dir, std::string& error) {
  std::vector<TenantView> out;
  DIR* d = opendir((dir + "/tenants").c_str());
  if (!d) {
    error = "cannot read " + dir + "/tenants: " + std::strerror(errno);
    return out;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (valid_tenant_name(e->d_name)) names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    std::string problem;
    auto h = TenantFileHandle::open(dir, name, TenantFileHandle::Mode::snapshot, problem);
    if (!h) {
      TenantView v;
      v.name = name;
      v.readable = false;
      v.problem = problem;
      out.push_back(v);
      continue;
    }
    out.push_back(view_of(policy_dir, *h, monotonic_ns(), wall_clock_ms()));  // right after the snapshot
  }
  return out;
}

int reap_tenant(const std::string& dir, const std::string& tenant, std::string& error) {
  auto h = TenantFileHandle::open(dir, tenant, TenantFileHandle::Mode::read_write, error);
  if (!h) return -1;
  // A recount needs a slot of its own, so that a recounter that dies is seen dead too: a free one,
  // else one whose process died (its lock is free). With only free ones, a table full of dead
  // processes, exactly when a reap is needed, could not be reaped at all.
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < kMaxProcesses; ++i) {
      ProcessSlot& s = h->file().slots[i];
      if ((s.state.load() == SlotState::free) != (pass == 0) || !h->try_lock_slot(i)) continue;
      const bool dead = s.state.load() == SlotState::live;
      if (dead) forget_accrual(s);
      MemoryLedger ledger(*h, i);
      if (dead) ledger.clear_slot();  // the recount counts its own slot: not with the dead's usage
      int reaped = ledger.recount();
      if (dead && reaped >= 0) {
        // Freed only once the totals no longer count it; after a failed recount it stays marked
        // live, so that the next refusal or reap still finds it dead and recounts.
        s.pid.store(0);
        s.state.store(SlotState::free);
        ++reaped;
      }
      h->unlock_slot(i);
      if (reaped < 0)
        error = "tenant '" + tenant + "': a recount is already under way, or a process is stopped mid-change";
      return reaped;
    }
  }
  error = "tenant '" + tenant + "' has no slot to work from";
  return -1;
}

}  // namespace slice

namespace slice {

bool remove_tenant(const std::string& dir, const std::string& tenant, bool force, std::string& error) {
  auto h = TenantFileHandle::open(dir, tenant, TenantFileHandle::Mode::read_write, error);
  if (!h) return false;
  // Under the registration lock: a process that joins takes its slot under it, and one that opened
  // the file before we remove it finds it removed once it has the lock, and makes a new one.
  if (!h->lock_init(2'000'000'000ull)) {
    error = "tenant '" + tenant + "': its registration lock was held for over 2 s (a process is joining): try again";
    return false;
  }
  int live = 0, dead = 0;
  std::string pids;
  for (int i = 0; i < kMaxProcesses; ++i) {
    const ProcessSlot& s = h->file().slots[i];
    if (s.state.load() != SlotState::live) continue;
    if (!h->slot_held_by_other(i)) {
      ++dead;
      continue;
    }
    if (++live <= 8) pids += (pids.empty() ? "" : " ") + std::to_string(s.pid.load());
  }
  const bool held = live > 0 || h->any_live_slot();  // a slot held but not yet marked: a process joining
  std::string why;
  if (held)
    why = "tenant '" + tenant + "' has " + std::to_string(live) + " live process" + (live == 1 ? "" : "es") +
          (pids.empty() ? "" : " (PID " + pids + (live > 8 ? " ..." : "") + ")") +
          ": its record is never removed under a running process, --force or not; stop them first";
  else if (dead > 0 && !force)
    why = "tenant '" + tenant + "' has " + std::to_string(dead) + " dead process" + (dead == 1 ? "" : "es") +
          " not yet reaped: add --force to remove it anyway (none of its processes is alive)";
  else if (!h->linked())
    why = "tenant '" + tenant + "' was removed meanwhile";
  else
    h->remove(why);  // in the folder it was opened in, and only while the name is still this file's
  h->unlock_init();
  if (why.empty()) return true;
  error = why;
  return false;
}

}  // namespace slice
