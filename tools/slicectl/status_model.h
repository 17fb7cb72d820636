// slicectl status's picture of a coordinator: the tenants as read_coordinator sees them, regrouped
// per GPU (by UUID, across tenants), with the warnings a reader should see. Both the table and the
// JSON print this one picture.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "coordinator_view.h"

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
  int index = 0;  // position in UUID order: stable however tenants come and go
  std::string uuid;
  std::string name;                // as the first tenant (by name) that uses it recorded it
  std::uint64_t total_bytes = 0;   // likewise
  std::uint64_t used_bytes = 0;    // sum over its tenants (saturating: files are not trusted)
  std::vector<TenantOnDevice> tenants;  // by tenant name
};

struct CoordinatorStatus {
  std::string dir;
  std::vector<slice::TenantView> tenants;  // by name
  std::vector<DeviceStatus> devices;       // by UUID
  std::vector<std::string> warnings;       // unreadable tenant files, ignored policy files
};

// Reads the coordinator at `dir`; fails (CommandError, exit 1) when there is none or it cannot be read.
CoordinatorStatus read_status(const std::string& dir);

// "2 dead processes not yet reaped", "1 dead process not yet reaped".
std::string dead_process_note(int count);

void print_status_table(const CoordinatorStatus& status);
void print_status_json(const CoordinatorStatus& status);

}  // namespace slicectl
