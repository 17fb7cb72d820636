#include "cdi_spec.h"

#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

namespace slice::k8s {
namespace {

// `s` as a JSON string (bytes that are not UTF-8 become U+FFFD).
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string string_list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quoted(items[i]);
  return out + "]";
}

std::string edits_json(const ContainerEdits& edits, const CdiOptions& options, const std::string& indent) {
  std::vector<std::string> env;
  for (const auto& [name, value] : edits.env) env.push_back(name + "=" + value);
  std::string out = "{\n" + indent + "  \"env\": " + string_list(env) + ",\n" + indent + "  \"mounts\": [\n";
  for (std::size_t i = 0; i < edits.mounts.size(); ++i) {
    const MountEdit& m = edits.mounts[i];
    std::vector<std::string> mount_options = {"bind", m.read_only ? "ro" : "rw", "nosuid", "nodev"};
    out += indent + "    {\"hostPath\": " + quoted(m.host_path) + ", \"containerPath\": " + quoted(m.container_path) +
           ", \"options\": " + string_list(mount_options) + "}" + (i + 1 < edits.mounts.size() ? ",\n" : "\n");
  }
  out += indent + "  ],\n" + indent + "  \"hooks\": [\n" + indent +
         "    {\"hookName\": \"createRuntime\", \"path\": " + quoted(options.hook_path) + ", \"args\": " +
         string_list({"slice-cdi-gen", "--prepare-coordinator", options.paths.host_coordinator_dir, "--policy-dir",
                      options.paths.host_policy_dir}) +
         "}\n" + indent + "  ]\n" + indent + "}";
  return out;
}

}  // namespace

std::string cdi_device_name(unsigned gpu_index, unsigned count, unsigned slices_per_gpu) {
  return "gpu" + std::to_string(gpu_index) + "-" + std::to_string(count) + "of" + std::to_string(slices_per_gpu);
}

std::string required_cdi_version(const Inventory& inventory) {
  for (const GpuSlices& g : inventory.gpus()) {
    const std::string name = cdi_device_name(g.gpu.index, 1, g.slices);
    if (name[0] >= '0' && name[0] <= '9') return "0.5.0";
  }
  return "0.3.0";
}

std::string cdi_spec_json(const Inventory& inventory, const CdiOptions& options) {
  std::string out = "{\n  \"cdiVersion\": " + quoted(required_cdi_version(inventory)) +
                    ",\n  \"kind\": " + quoted(options.kind) + ",\n  \"devices\": [";
  bool first = true;
  for (const GpuSlices& g : inventory.gpus()) {
    for (unsigned count = 1; count <= g.slices; ++count) {
      // No SLICE_TENANT: a CDI device may be given to many containers at once, so each process
      // tree becomes its own tenant with the device's limits.
      const ContainerEdits edits = container_edits(inventory, {{g.gpu.uuid, count}}, options.paths, "");
      out += std::string(first ? "\n" : ",\n") +
             "    {\n      \"name\": " + quoted(cdi_device_name(g.gpu.index, count, g.slices)) +
             ",\n      \"containerEdits\": " + edits_json(edits, options, "      ") + "\n    }";
      first = false;
    }
  }
  return out + "\n  ]\n}\n";
}

}  // namespace slice::k8s
