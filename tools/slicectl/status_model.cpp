#include "status_model.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>

#include "cli.h"

namespace slicectl {

namespace {

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return b > ~a ? ~std::uint64_t{0} : a + b; }

}  // namespace

std::string dead_process_note(int count) {
  return std::to_string(count) + (count == 1 ? " dead process" : " dead processes") + " not yet reaped";
}

std::vector<slice::GpuInfo> nvml_gpus(std::string& note) {
  // Loaded once: `top` and `metrics --listen` ask again at every refresh and scrape.
  static std::string open_error;
  static const std::unique_ptr<slice::NvmlLibrary> nvml = slice::NvmlLibrary::open("libnvidia-ml.so.1", open_error);
  std::vector<slice::GpuInfo> gpus;
  if (!nvml) {
    note = "NVML is not there (" + open_error + "): only the GPUs libslice processes have used are listed";
    return gpus;
  }
  std::string error;
  if (!nvml->list_gpus(gpus, error)) {
    note = "NVML did not list the GPUs (" + error + "): only the GPUs libslice processes have used are listed";
    gpus.clear();
  }
  return gpus;
}

bool coordinator_is_idle(const std::string& dir) {
  // No folder, or one made empty at boot (tmpfiles.d): nobody has run yet. Anything else that
  // cannot be read is a fault, and says so.
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return errno == ENOENT;
  return S_ISDIR(st.st_mode) && stat((dir + "/tenants").c_str(), &st) != 0 && errno == ENOENT;
}

std::vector<slice::TenantView> read_live_tenants(const CommonOptions& common) {
  if (coordinator_is_idle(common.coordinator)) return {};
  require_coordinator(common.coordinator);
  std::string error;
  std::vector<slice::TenantView> tenants = slice::read_coordinator(common.coordinator, common.policy_dir, error);
  if (!error.empty()) fail(error);
  return tenants;
}

CoordinatorStatus read_status(const std::string& dir, const std::string& policy_dir) {
  CoordinatorStatus s;
  s.dir = dir;
  s.idle = coordinator_is_idle(dir);
  if (!s.idle) {
    require_coordinator(dir);
    std::string error;
    s.tenants = slice::read_coordinator(dir, policy_dir, error);
    if (!error.empty()) fail(error);
    s.idle = s.tenants.empty();  // a folder made at boot, or every tenant removed
  }

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
  // NVML's GPUs first, by its index, with the tenants on each; then any GPU only the tenants know
  // (NVML missing, or a GPU this machine's NVML does not show), in UUID order.
  int next_index = 0;
  for (const slice::GpuInfo& g : nvml_gpus(s.nvml_note)) {
    DeviceStatus d;
    if (auto it = by_uuid.find(g.uuid); it != by_uuid.end()) {
      d = std::move(it->second);
      by_uuid.erase(it);
    } else {
      d.uuid = g.uuid;
      d.name = g.name;
      d.total_bytes = g.total_bytes;
    }
    d.index = static_cast<int>(g.index);
    next_index = std::max(next_index, d.index + 1);
    s.devices.push_back(std::move(d));
  }
  for (auto& [uuid, d] : by_uuid) {
    d.index = next_index++;
    s.devices.push_back(std::move(d));
  }
  std::sort(s.devices.begin(), s.devices.end(),
            [](const DeviceStatus& a, const DeviceStatus& b) { return a.index < b.index; });
  // Tenants point into s.tenants, which is not moved again.
  return s;
}

}  // namespace slicectl
