// An administrator's limits for a tenant: the text file SLICE_POLICY_DIR/<tenant> (by default
// SLICE_DEFAULT_POLICY_DIR), in a folder that only root may write. They win over anything a tenant brings
// in its environment, and a tenant's processes cannot change them. The folder is persistent, apart
// from the coordinator's live state: a policy outlasts a reboot and holds from a new process's
// first allocation.
//
//   # limits of tenant "inference"
//   memory_limit = 4Gi                 bytes, a quantity, or a percentage of the device
//   memory_limit.GPU-5a1c... = 8Gi     for one GPU, by its UUID
//   compute_share = 30
//   compute_limit = 50
//   priority = high
//   group = 1001                       the group whose members run the tenant's processes
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
#include <vector>

#include "coordinator_layout.h"
#include "limits_text.h"
#include "config_values.h"
#include "gpu_uuid.h"  // uuid_text
#include "quantity.h"

namespace slice {

struct Policy {
  std::optional<MemoryLimit> memory;                          // all GPUs
  std::map<std::string, std::optional<MemoryLimit>> per_gpu;  // "GPU-xxxxxxxx-..." -> limit
  std::optional<std::uint32_t> compute_share;
  std::optional<std::uint32_t> compute_limit;
  std::optional<Priority> priority;
  // Not a limit: who may write the tenant's live file, which root makes at boot (slicectl prepare).
  std::optional<unsigned> group;

  std::optional<MemoryLimit> memory_for(const std::uint8_t uuid[16]) const;
  std::string to_text(const std::string& tenant) const;
};

enum class PolicyStatus { none, ok, untrusted, invalid };

// Reads and checks the tenant's policy in `policy_dir`; `message` explains untrusted and invalid.
PolicyStatus read_policy(const std::string& policy_dir, const std::string& tenant, Policy& out, std::string& message);
bool parse_policy(const std::string& text, Policy& out, std::string& message);
// Writes it (as root: the folder is created root-owned) and bumps the generation that running
// processes watch, so the change takes effect at their next allocation.
bool write_policy(const std::string& policy_dir, const std::string& tenant, const Policy& policy, std::string& error);
// Removes it (as root), and bumps the generation; a policy that is not there is no error.
bool remove_policy(const std::string& policy_dir, const std::string& tenant, std::string& error);
// The tenants that have a policy file there, sorted (whether or not it is trusted and valid).
std::vector<std::string> policy_tenants(const std::string& policy_dir);

// An administrator takes a tenant over (root, with its policy): its tenant file becomes root's,
// writable by `group` (the tenant's processes must run in it), so that no tenant process can delete
// or replace it. A tenant that could would start again from a fresh file with zero usage and pass
// its cap. A file that is not root's alone is replaced by a new one (TenantFileHandle::make_managed);
// `notice`, if given, names processes that still run in the old one.
bool adopt_tenant_file(const std::string& dir, const std::string& tenant, std::optional<unsigned> group,
                       std::string& error, std::string* notice = nullptr);

// Processes of a tenant that an administrator manages (it has a trusted policy) do not create or
// rebuild its file themselves: the file must be root's, made by adopt_tenant_file. Returns false with
// the reason when that is not so; true when the tenant is not managed or the caller is root.
bool managed_tenant_file_ok(const std::string& dir, const std::string& policy_dir, const std::string& tenant,
                            std::string& error);

// Run as root: makes the policy folder (and its parents) root-owned, with its generation counter, so
// that running processes find policies from their first allocation on.
bool prepare_policy_folder(const std::string& policy_dir, std::string& error);

// What `slicectl prepare` does at boot (and the CDI hook and the device plugin at their start), as
// root: the coordinator folder, the policy folder, and a root-owned live file for every tenant a
// trusted policy manages (with the policy's group), so that its processes can start. `done` gets a
// line per tenant file made or checked, `problems` one per policy that could not be honoured.
bool prepare_machine(const std::string& dir, const std::string& policy_dir, std::vector<std::string>& done,
                     std::vector<std::string>& problems, std::string& error);

// The policy generation counter, mapped read-only: reading it costs one load.
class PolicyWatcher {
 public:
  ~PolicyWatcher();
  void open(const std::string& policy_dir);
  // 0 when no policy folder exists (it is looked for again once a second, by the coarse monotonic
  // clock: `now_ns` where the caller has read it, else read here). Safe from any thread. One load
  // when the folder is there; two when it is not, but for the look once a second.
  std::uint64_t generation(std::uint64_t now_ns = 0) {
    if (const auto* counter = counter_.load(std::memory_order_acquire))
      return counter->load(std::memory_order_acquire) + 1;
    if (now_ns != 0 && now_ns < next_look_ns_.load(std::memory_order_relaxed))
      return 0;  // looked less than a second ago
    return look(now_ns);
  }

 private:
  std::uint64_t look(std::uint64_t now_ns);

  std::string policy_dir_;
  std::atomic<const std::atomic<std::uint64_t>*> counter_{nullptr};
  std::atomic<std::uint64_t> next_look_ns_{0};
  std::mutex look_mu_;  // one thread looks for the counter at a time
};

}  // namespace slice
