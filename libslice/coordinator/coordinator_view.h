// What the tools see of a coordinator: every tenant, its limits, its usage per GPU and its live
// processes, read without trusting the files (a tenant may have corrupted its own), the repair
// of dead processes on demand (`slicectl gc`) and a tenant's removal (`slicectl rm`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "coordinator_layout.h"
#include "usage_history.h"

namespace slice {

enum class Reconciled { never, measured, unmeasurable };

struct ProcessView {
  std::int32_t pid = 0;
  std::string comm;
  std::vector<std::uint64_t> memory_used;  // per GPU of the tenant view
  // Of memory_used: what the driver holds beyond what was charged call by call (the process's
  // reconciliation with the driver's own figure, SlotDevice::overhead), per GPU, and whether it was
  // measured at all.
  std::vector<std::uint64_t> memory_overhead;
  std::vector<Reconciled> reconciled;
};

struct TenantGpuView {
  std::string uuid;  // "GPU-..."
  std::string name;
  std::uint64_t total_bytes = 0;
  std::uint64_t used_bytes = 0;      // the tenant's, from its live processes
  std::uint64_t overhead_bytes = 0;  // of used_bytes: reconciled overhead (ProcessView::memory_overhead)
  // measured when any live process measured it; unmeasurable when all that tried could not.
  Reconciled reconciled = Reconciled::never;
  std::uint64_t cap_bytes = kNoLimit;  // effective: policy, else registered
  // Effective compute share here, as the scheduler takes it (Coordinator::compute(device)): the
  // policy's, else the one registered for this GPU, else the tenant's registered share.
  std::uint32_t compute_share = 100;
  // Compute on this GPU, from what the tenant's processes publish in its file (not trusted: the
  // figures are clamped). received_ns: device time it received here, cumulative, as libslice's
  // compute scheduler estimates it. compute_used_*: the share of the device's time it received over
  // the last second / ten seconds (0..1), measured as the scheduler measures it (received_over on the
  // tenant's history, at the time the file was read); empty while the tenant has no history here.
  std::uint64_t received_ns = 0;
  std::optional<double> compute_used_1s;
  std::optional<double> compute_used_10s;
  // Metering, for chargeback: cumulative here since the tenant's record began, kept after its
  // processes exit (until `slicectl rm`). device_ns_total: device time received (received_ns);
  // memory_byte_seconds_total: memory held, integrated over time, up to the moment it was read
  // (a process's memory counts while it lives). usage_started_ms: when the record began (wall
  // clock, ms; 0: nothing recorded yet); usage_samples: its hourly samples (usage_history.h).
  std::uint64_t device_ns_total = 0;
  double memory_byte_seconds_total = 0;
  std::uint64_t usage_started_ms = 0;
  std::vector<UsagePoint> usage_samples;
  // The totals above as a point of the history (at TenantView::read_wall_ms).
  UsagePoint usage_now(std::uint64_t read_wall_ms) const {
    return {read_wall_ms, device_ns_total, memory_byte_seconds_total};
  }
};

struct TenantView {
  std::string name;
  bool readable = true;
  std::string problem;         // why it could not be read, when !readable
  bool policy = false;         // limits come from an administrator's policy
  std::string policy_problem;  // why a policy file that exists is ignored (untrusted or invalid)
  // Effective compute settings, as the scheduler takes them (Coordinator::compute(), which its
  // processes publish per GPU): the policy's, else what the tenant registered, else the defaults.
  // compute_share is the tenant's on GPUs without a share of their own (TenantGpuView's).
  Priority priority = Priority::normal;
  std::uint32_t compute_share = 100;
  std::uint32_t compute_limit = 100;
  std::vector<TenantGpuView> gpus;
  std::vector<ProcessView> processes;  // live ones only
  int dead_processes = 0;              // slots whose process died and that no one has reaped yet
  std::uint64_t read_wall_ms = 0;      // when the file was read (wall clock, ms since the epoch)
};

// The share of a window's device time received over it, as the compute scheduler measures it:
// received_over(history, received_ns, now_ns, window_ns) / window_ns, clamped to [0, 1]; empty when
// the history has no sample yet.
std::optional<double> compute_used(const ReceivedHistory& history, std::uint64_t received_ns, std::uint64_t now_ns,
                                   std::uint64_t window_ns);

// Reads every tenant of the coordinator (with the policies of `policy_dir`). `error` is set (and the result empty) only
// when the folder itself cannot be read.
std::vector<TenantView> read_coordinator(const std::string& dir, const std::string& policy_dir, std::string& error);

// Reaps the dead processes of one tenant (needs write access: root, or the tenant's own user).
// Returns the number reaped, or -1 with `error`.
int reap_tenant(const std::string& dir, const std::string& tenant, std::string& error);

// Removes a tenant's file, and with it its usage record (`slicectl rm`). Never while a live process
// holds a slot in it; with dead processes not yet reaped only when `force`. Needs write access to the
// file and the right to remove it (root, or the file's owner). Returns false with `error`.
bool remove_tenant(const std::string& dir, const std::string& tenant, bool force, std::string& error);

}  // namespace slice
