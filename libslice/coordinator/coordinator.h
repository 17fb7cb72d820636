// A process's membership of the coordinator: it joins its tenant (registering the tenant's limits if
// it is the first), takes a process slot, meets its GPUs by UUID, and reserves and releases memory
// against the tenant's effective cap: the administrator's policy if there is one, else what the
// tenant registered.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "memory_ledger.h"
#include "config_values.h"
#include "limits_text.h"
#include "policy.h"
#include "tenant_file.h"

namespace slice {

using Uuid = std::array<std::uint8_t, 16>;

struct DeviceInfo {
  Uuid uuid{};
  std::string name;
  std::uint64_t total_bytes = 0;
  std::optional<MemoryLimit> memory;           // this process's wish for this device
  std::optional<std::uint32_t> compute_share;  // ... and its share there, where it differs from the request's
};

struct JoinRequest {
  std::string dir;         // the coordinator folder (live state)
  std::string policy_dir;  // the administrator's policies (persistent)
  std::string tenant;
  std::vector<DeviceInfo> devices;
  std::uint32_t compute_share = 100;
  std::uint32_t compute_limit = 100;
  Priority priority = Priority::normal;
};

class Coordinator {
 public:
  // Joins; on failure returns nullptr and a message that says what to fix. `warnings` receives
  // lines such as a later process bringing other limits than the tenant registered.
  static std::unique_ptr<Coordinator> join(const JoinRequest& request, std::string& error,
                                           std::vector<std::string>& warnings);
  ~Coordinator();  // gives back this process's memory and slot
  // The same, leaving the object in place, for a process that exits while other threads may still
  // call in: from then on allocations go through uncharged (the process is going away) and caps
  // still read as they were. Anything a thread added in the instant between is not counted once
  // the slot is free: a recount sums live slots only.
  void leave();

  // `device` is the index into the JoinRequest's devices.
  bool reserve(int device, std::uint64_t bytes, Refusal* why = nullptr);
  void release(int device, std::uint64_t bytes);
  // Counts memory the driver already gave out, cap or no cap (a pool that grew by a whole chunk
  // more than asked): usage that leaves it out would lie, and later requests are refused instead.
  // Never fails: a later release of these bytes must find them.
  void charge_unchecked(int device, std::uint64_t bytes);
  std::uint64_t cap(int device);          // kNoLimit when none
  std::uint64_t usage(int device) const;  // the tenant's, on that device
  std::uint64_t mine(int device) const;   // this process's part of it
  // Reconciliation (shim/reconcile.cpp): what the driver holds for this process beyond what was
  // charged call by call becomes its overhead, charged like any memory (never refused: the driver
  // holds it already) and shown apart; `measurable` false: the driver's figure could not be had.
  void set_overhead(int device, std::uint64_t bytes, bool measurable);
  std::uint64_t overhead(int device) const;
  // The same after giving back what dead processes still hold (for reports, not the hot path).
  std::uint64_t usage_without_dead(int device);

  // CUDA IPC: remembers that this process exported the handle with this digest (false: no room
  // left near its place in the table); forgets it when its memory is freed; tells whether a live
  // process of the tenant exported it (then opening it is not new memory for the tenant).
  bool note_ipc_export(std::uint64_t digest);
  void withdraw_ipc_export(std::uint64_t digest);
  bool ipc_exported_by_tenant(std::uint64_t digest) const;

  // Compute: the tenant's effective settings (an administrator's policy, else what it registered),
  // re-read when a policy changes; and its shared entry and history for a device.
  struct ComputeSettings {
    std::uint32_t share = 100;
    std::uint32_t limit = 100;
    Priority priority = Priority::normal;
  };
  ComputeSettings compute(int device);
  // compute(device), also written into the tenant's device entry for the other tenants' schedulers
  // (at join, and at each tick of the compute watcher that decides, i.e. while the process has or
  // wants work, so that a policy change shows).
  ComputeSettings publish_compute_settings(int device);
  DeviceEntry& device_entry(int device) { return tenant_->file().devices[entries_[device]]; }
  // Publishes this process's compute state on a device (kSlotActive | kSlotWanting) and recounts the
  // tenant's active and wanting processes from the slots; `check_liveness` also clears the flags of
  // slots whose process is gone (a system call per flagged slot: now and then, not every time).
  // `held`: this process's launches are held back (it yields the device): its work ending then is a
  // change of turns, and the tenants waiting for the device are woken (DeviceEntry::turn_seq).
  void publish_compute(int device, std::uint32_t flags, bool check_liveness, bool held = false);
  // This process has just started holding its launches back, its queued work due to be done at
  // `drain_eta_ns` (0: none left): the tenants waiting for the device are woken
  // (DeviceEntry::turn_seq) to look again, or to sleep until shortly before then.
  void yield_compute(int device, std::uint64_t drain_eta_ns);
  ReceivedHistory& received_history(int device) { return tenant_->file().history[entries_[device]]; }
  const std::string& dir() const { return dir_; }

  // PIDs of the tenant's processes whose slots are live (as each process sees itself).
  std::vector<std::int32_t> live_pids() const;

  const std::string& tenant() const { return tenant_->name(); }
  int slot() const { return slot_; }
  MemoryLedger& ledger() { return *ledger_; }
  TenantFileHandle& tenant_file() { return *tenant_; }

 private:
  Coordinator() = default;
  bool claim_slot(std::string& error);
  void publish_compute_locked_out(int device);  // this process leaving: its flags gone, counts without it
  int entry_for(const DeviceInfo& d, std::string& error);
  void refresh_policy(std::uint64_t now_ns = 0);  // `now_ns`: coarse_monotonic_ns(), if the caller has it
  [[gnu::noinline]] void reread_policy();         // refresh_policy's work, when the generation changed

  std::unique_ptr<TenantFileHandle> tenant_;
  std::unique_ptr<MemoryLedger> ledger_;
  PolicyWatcher policy_;
  std::string dir_;
  std::string policy_dir_;
  int slot_ = -1;
  std::vector<int> entries_;  // JoinRequest device index -> tenant file device entry
  // Effective cap per JoinRequest device, and compute settings: read by any thread, rewritten under
  // policy_mu_ when an administrator's policy changed.
  std::unique_ptr<std::atomic<std::uint64_t>[]> caps_;
  std::size_t cap_count_ = 0;
  std::vector<std::uint64_t> device_totals_;                      // as the driver reported them
  std::vector<Uuid> device_uuids_;                                // likewise
  std::unique_ptr<std::atomic<std::uint32_t>[]> compute_shares_;  // per JoinRequest device
  std::atomic<std::uint32_t> compute_limit_{100}, compute_priority_{0};
  bool stale_slot_ = false;  // our slot was a dead process's
  // In a child made by fork: the parent's slot is not ours, so nothing is charged or published and
  // reserve refuses. Set by the fork handler (on_fork_child).
  std::atomic<bool> forked_{false};
  static void on_fork_child();
  std::mutex policy_mu_;
  std::atomic<std::uint64_t> policy_generation_{0};
  std::atomic<bool> policy_read_{false};                // a planted counter must never make the first read look done
  std::atomic<bool> left_{false};                       // leave() ran: nothing is charged any more
  std::atomic<int> compute_scan_limit_{kMaxProcesses};  // slots publish_compute looks at (highest in use + 1)
};

}  // namespace slice
