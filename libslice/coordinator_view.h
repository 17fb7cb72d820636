// What the tools see of a coordinator: every tenant, its limits, its usage per GPU and its live
// processes, read without trusting the files (a tenant may have corrupted its own), and the repair
// of dead processes on demand (`slicectl gc`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "coordinator_layout.h"

namespace slice {

struct ProcessView {
  std::int32_t pid = 0;
  std::string comm;
  std::vector<std::uint64_t> memory_used;  // per GPU of the tenant view
};

struct TenantGpuView {
  std::string uuid;  // "GPU-..."
  std::string name;
  std::uint64_t total_bytes = 0;
  std::uint64_t used_bytes = 0;     // the tenant's, from its live processes
  std::uint64_t cap_bytes = kNoLimit;  // effective: policy, else registered
};

struct TenantView {
  std::string name;
  bool readable = true;
  std::string problem;   // why it could not be read, when !readable
  bool policy = false;   // limits come from an administrator's policy
  std::string policy_problem;  // why a policy file that exists is ignored (untrusted or invalid)
  Priority priority = Priority::normal;
  std::uint32_t compute_share = 100;
  std::uint32_t compute_limit = 100;
  std::vector<TenantGpuView> gpus;
  std::vector<ProcessView> processes;  // live ones only
  int dead_processes = 0;             // slots whose process died and that no one has reaped yet
};

// Reads every tenant of the coordinator. `error` is set (and the result empty) only when the folder
// itself cannot be read.
std::vector<TenantView> read_coordinator(const std::string& dir, std::string& error);

// Reaps the dead processes of one tenant (needs write access: root, or the tenant's own user).
// Returns the number reaped, or -1 with `error`.
int reap_tenant(const std::string& dir, const std::string& tenant, std::string& error);

}  // namespace slice
