#include "container_edits.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "config.h"
#include "tenant_file.h"
#include "variables.h"

namespace slice::k8s {
namespace {

std::string per_gpu_variable(VariableId id, const std::string& uuid) {
  return std::string(variable_info(id).name) + "_" + gpu_uuid_suffix(uuid);
}

std::string hash_text(const std::vector<std::string>& ids) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  for (const std::string& id : ids) {
    for (const unsigned char c : id + "\n") {
      h ^= c;
      h *= 1099511628211ull;
    }
  }
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

}  // namespace

ContainerEdits container_edits(const Inventory& inventory, const std::map<std::string, unsigned>& slices,
                               const EditPaths& paths, const std::string& tenant) {
  ContainerEdits edits;
  unsigned least_share = 100;
  for (const GpuSlices& g : inventory.gpus()) {
    const auto it = slices.find(g.gpu.uuid);
    if (it == slices.end() || it->second == 0) continue;
    const unsigned count = it->second;
    const std::uint64_t memory = g.memory_per_slice * count;
    const unsigned share = std::min(100u, g.share_per_slice * count);
    edits.gpu_uuids.push_back(g.gpu.uuid);
    // Keyed by UUID: the container numbers its GPUs from 0 whatever the node calls them, and a
    // CUDA_VISIBLE_DEVICES inside it renumbers them again; a UUID cannot be misread.
    edits.env[per_gpu_variable(VariableId::SLICE_MEMORY_LIMIT, g.gpu.uuid)] = std::to_string(memory);
    edits.env[per_gpu_variable(VariableId::SLICE_COMPUTE_SHARE, g.gpu.uuid)] = std::to_string(share);
    edits.policy.per_gpu[g.gpu.uuid] = MemoryLimit::of_bytes(memory);
    least_share = std::min(least_share, share);
  }
  // A policy has one share for all GPUs: the smallest of the allocation's, so that a container
  // whose slices are spread over GPUs never gets more than it holds on any of them.
  edits.policy.compute_share = least_share;
  // The whole policy, not only what the slices size: a tenant file left by an earlier pod on the
  // same slices, or planted by another, must not bring its own limit or priority. And GPUs outside
  // the allocation get the smallest cap there is, for a container whose spec makes more GPUs visible
  // (NVIDIA_VISIBLE_DEVICES=all) than it was given.
  edits.policy.compute_limit = 100;
  edits.policy.priority = Priority::normal;
  edits.policy.memory = MemoryLimit::of_bytes(1);

  std::string visible;
  for (const std::string& uuid : edits.gpu_uuids) visible += (visible.empty() ? "" : ",") + uuid;
  edits.env["NVIDIA_VISIBLE_DEVICES"] = visible;
  edits.env[std::string(variable_info(VariableId::SLICE_COORDINATOR_DIR).name)] = paths.container_coordinator_dir;
  edits.env[std::string(variable_info(VariableId::SLICE_POLICY_DIR).name)] = paths.container_policy_dir;
  if (!tenant.empty()) edits.env[std::string(variable_info(VariableId::SLICE_TENANT).name)] = tenant;

  const std::string library = paths.container_lib_dir + "/" + kLibraryFileName;
  edits.mounts.push_back({paths.host_lib_dir + "/" + kLibraryFileName, library, true});
  // /etc/ld.so.preload loads libslice.so into every process of the container, whatever its
  // environment says (LD_PRELOAD can be unset by a program; this file cannot, being read-only).
  edits.mounts.push_back({paths.host_lib_dir + "/" + kPreloadFileName, "/etc/ld.so.preload", true});
  // The node's coordinator: every container on the node shares one view of every GPU's budgets.
  edits.mounts.push_back({paths.host_coordinator_dir, paths.container_coordinator_dir, false});
  // The owner's policy folder, read-only: even root in the container cannot rewrite the owner's
  // limits through this mount. It is persistent and made when the spec is written or the plugin
  // starts (a bind mount of a missing folder fails the container's start).
  edits.mounts.push_back({paths.host_policy_dir, paths.container_policy_dir, true});
  return edits;
}

std::string tenant_for_slices(const std::vector<std::string>& ids) {
  std::vector<std::string> sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  std::string gpu;
  std::vector<unsigned> indices;
  bool one_gpu = !sorted.empty();
  for (const std::string& id : sorted) {
    const auto parsed = parse_slice_id(id);
    if (!parsed || (!gpu.empty() && parsed->gpu_uuid != gpu)) {
      one_gpu = false;
      break;
    }
    gpu = parsed->gpu_uuid;
    indices.push_back(parsed->index);
  }
  if (one_gpu && gpu.size() >= 8) {
    std::sort(indices.begin(), indices.end());
    std::string name = "k8s-" + gpu.substr(gpu.size() - 8);
    for (const unsigned k : indices) name += "-" + std::to_string(k);
    if (valid_tenant_name(name)) return name;
  }
  return "k8s-" + hash_text(sorted);
}

}  // namespace slice::k8s
