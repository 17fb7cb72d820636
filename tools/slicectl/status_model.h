// slicectl status's picture of a coordinator: the tenants as read_coordinator sees them, regrouped
// per GPU (by UUID, across tenants), with the warnings a reader should see. Both the table and the
// JSON print this one picture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cli.h"
#include "coordinator_view.h"
#include "nvml_library.h"

namespace slicectl {

// One tenant on one GPU: the tenant, and which of its GPUs this is (index into tenant->gpus;
// ProcessView::memory_used is indexed the same way).
struct TenantOnDevice {
  const slice::TenantView* tenant = nullptr;
  std::size_t gpu = 0;

  const slice::TenantGpuView& usage() const { return tenant->gpus[gpu]; }
  std::uint64_t process_memory(const slice::ProcessView& p) const {
    return gpu < p.memory_used.size() ? p.memory_used[gpu] : 0;
  }
  std::uint64_t process_overhead(const slice::ProcessView& p) const {
    return gpu < p.memory_overhead.size() ? p.memory_overhead[gpu] : 0;
  }
  slice::Reconciled process_reconciled(const slice::ProcessView& p) const {
    return gpu < p.reconciled.size() ? p.reconciled[gpu] : slice::Reconciled::never;
  }
};

struct DeviceStatus {
  // NVML's index (as nvidia-smi numbers the GPUs); where NVML is not there, or does not see this
  // GPU, the position in UUID order after NVML's: stable however tenants come and go.
  int index = 0;
  std::string uuid;
  std::string name;                     // as the first tenant (by name) that uses it recorded it, else NVML's
  std::uint64_t total_bytes = 0;        // likewise
  std::uint64_t used_bytes = 0;         // sum over its tenants (saturating: files are not trusted)
  std::vector<TenantOnDevice> tenants;  // by tenant name
};

struct CoordinatorStatus {
  std::string dir;
  // No tenant: no libslice process has run with this coordinator yet (no folder, or one made at
  // boot), or every tenant was removed. A normal state (an idle machine), not an error.
  bool idle = false;
  std::vector<slice::TenantView> tenants;  // by name
  std::vector<DeviceStatus> devices;       // by index
  std::vector<std::string> warnings;       // unreadable tenant files, ignored policy files
  std::string nvml_note;                   // why NVML's GPUs are not listed; empty when they are
};

// Every GPU NVML sees: libnvidia-ml.so.1, found as any NVML client finds it, loaded at the first
// call and kept. Nothing when it is not there, and `note` says why.
std::vector<slice::GpuInfo> nvml_gpus(std::string& note);

// Every tenant of the coordinator, or none when it is idle (coordinator_is_idle); fails (exit 1)
// when it exists but cannot be read.
bool coordinator_is_idle(const std::string& dir);
std::vector<slice::TenantView> read_live_tenants(const CommonOptions& common);

// Reads the coordinator at `dir` (with the policies of `policy_dir`) and the GPUs NVML sees. A
// coordinator folder that does not exist is an idle machine; one that exists but cannot be read
// fails (CommandError, exit 1).
CoordinatorStatus read_status(const std::string& dir, const std::string& policy_dir);

// "2 dead processes not yet reaped", "1 dead process not yet reaped".
std::string dead_process_note(int count);

void print_status_table(const CoordinatorStatus& status);
void print_status_json(const CoordinatorStatus& status);

}  // namespace slicectl
