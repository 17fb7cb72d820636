#include "status_model.h"

#include <algorithm>
#include <map>

#include "cli.h"

namespace slicectl {

namespace {

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return b > ~a ? ~std::uint64_t{0} : a + b; }

}  // namespace

std::string dead_process_note(int count) {
  return std::to_string(count) + (count == 1 ? " dead process" : " dead processes") + " not yet reaped";
}

CoordinatorStatus read_status(const std::string& dir) {
  require_coordinator(dir);
  CoordinatorStatus s;
  s.dir = dir;
  std::string error;
  s.tenants = slice::read_coordinator(dir, error);
  if (!error.empty()) fail(error);

  std::map<std::string, DeviceStatus> by_uuid;  // ordered: the UUID order gives the index
  for (const slice::TenantView& t : s.tenants) {
    if (!t.readable) {
      s.warnings.push_back("tenant '" + t.name + "' cannot be read: " + t.problem);
      continue;
    }
    if (!t.policy_problem.empty()) s.warnings.push_back("tenant '" + t.name + "': " + t.policy_problem);
    for (std::size_t g = 0; g < t.gpus.size(); ++g) {
      const slice::TenantGpuView& gpu = t.gpus[g];
      auto [it, fresh] = by_uuid.try_emplace(gpu.uuid);
      DeviceStatus& d = it->second;
      if (fresh) {
        d.uuid = gpu.uuid;
        d.name = gpu.name;
        d.total_bytes = gpu.total_bytes;
      }
      d.used_bytes = saturating_add(d.used_bytes, gpu.used_bytes);
      d.tenants.push_back({&t, g});
    }
  }
  for (auto& [uuid, d] : by_uuid) {
    d.index = static_cast<int>(s.devices.size());
    s.devices.push_back(std::move(d));
  }
  return s;
}

}  // namespace slicectl
