// An administrator's limits for a tenant: the text file SLICE_COORDINATOR_DIR/policy/<tenant>, in a
// folder that only root may write. They win over anything a tenant brings in its environment, and
// a tenant's processes cannot change them.
//
//   # limits of tenant "inference"
//   memory_limit = 4Gi                 bytes, a quantity, or a percentage of the device
//   memory_limit.GPU-5a1c... = 8Gi     for one GPU, by its UUID
//   compute_share = 30
//   compute_limit = 50
//   priority = high
//
// A policy file is trusted only when it and its folder belong to root and nobody else may write
// them; anything else is ignored, with a warning, so a tenant cannot plant one.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "coordinator_layout.h"
#include "limits_text.h"
#include "config_values.h"
#include "quantity.h"

namespace slice {

struct Policy {
  std::optional<MemoryLimit> memory;                          // all GPUs
  std::map<std::string, std::optional<MemoryLimit>> per_gpu;  // "GPU-xxxxxxxx-..." -> limit
  std::optional<std::uint32_t> compute_share;
  std::optional<std::uint32_t> compute_limit;
  std::optional<Priority> priority;

  std::optional<MemoryLimit> memory_for(const std::uint8_t uuid[16]) const;
  std::string to_text(const std::string& tenant) const;
};

enum class PolicyStatus { none, ok, untrusted, invalid };

// Reads and checks the tenant's policy; `message` explains untrusted and invalid.
PolicyStatus read_policy(const std::string& dir, const std::string& tenant, Policy& out, std::string& message);
bool parse_policy(const std::string& text, Policy& out, std::string& message);
// Writes it (as root: the folder is created root-owned) and bumps the generation that running
// processes watch, so the change takes effect at their next allocation.
bool write_policy(const std::string& dir, const std::string& tenant, const Policy& policy, std::string& error);

// An administrator takes a tenant over (root, with its policy): its tenant file becomes root's,
// writable by `group` (the tenant's processes must run in it), so that no tenant process can delete
// or replace it. A tenant that could would start again from a fresh file with zero usage and pass
// its cap. Creates (or rebuilds) the file when needed; without `group`, an existing file keeps
// its group and a new one gets root's.
bool adopt_tenant_file(const std::string& dir, const std::string& tenant, std::optional<unsigned> group,
                       std::string& error);

// Processes of a tenant that an administrator manages (it has a trusted policy) do not create or
// rebuild its file themselves: the file must be root's, made by adopt_tenant_file. Returns false with
// the reason when that is not so; true when the tenant is not managed or the caller is root.
bool managed_tenant_file_ok(const std::string& dir, const std::string& tenant, std::string& error);

// Run as root when the coordinator folder is prepared: makes the policy folder root-owned before a
// tenant could make it (the coordinator folder is writable by all), with its generation counter,
// so running processes find policies from their first allocation on.
bool prepare_policy_folder(const std::string& dir, std::string& error);

std::string uuid_text(const std::uint8_t uuid[16]);  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"

// The policy generation counter, mapped read-only: reading it costs one load.
class PolicyWatcher {
 public:
  ~PolicyWatcher();
  void open(const std::string& dir);
  // 0 when no policy folder exists (it is looked for again now and then). Safe from any thread.
  std::uint64_t generation();

 private:
  std::string dir_;
  std::atomic<const std::atomic<std::uint64_t>*> counter_{nullptr};
  std::atomic<std::uint64_t> next_look_ns_{0};
  std::mutex look_mu_;  // one thread looks for the counter at a time
};

}  // namespace slice
