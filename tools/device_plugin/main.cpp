// slice-device-plugin: a Kubernetes device plugin that hands out libslice GPU slices.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "nvml_library.h"
#include "plugin_options.h"
#include "plugin_server.h"
#include "policy.h"
#include "slice_inventory.h"
#include "tenant_file.h"

namespace {

using namespace slice::k8s;
using slice::GpuInfo;
using slice::NvmlLibrary;

void print_slices(const Inventory& inventory) {
  for (const GpuSlices& g : inventory.gpus()) {
    std::printf("GPU %u %s %s: %llu bytes, %u slices of %llu bytes and %u%%\n", g.gpu.index, g.gpu.uuid.c_str(),
                g.gpu.name.c_str(), static_cast<unsigned long long>(g.gpu.total_bytes), g.slices,
                static_cast<unsigned long long>(g.memory_per_slice), g.share_per_slice);
    for (unsigned k = 0; k < g.slices; ++k) std::printf("  %s\n", slice_id(g.gpu.uuid, k).c_str());
  }
}

// The init container installs libslice.so and an ld.so.preload naming where containers see it;
// a mismatch would leave every container without libslice, so say so at start.
void check_installed_library(const PluginOptions& options) {
  const std::string dir = options.paths.host_lib_dir;
  if (::access((dir + "/" + kLibraryFileName).c_str(), R_OK) != 0)
    spdlog::warn("{}/{} is missing: containers will not load libslice (is the init container installing it?)", dir,
                 kLibraryFileName);
  std::ifstream preload(dir + "/" + kPreloadFileName);
  std::stringstream text;
  text << preload.rdbuf();
  const std::string expected = options.paths.container_lib_dir + "/" + kLibraryFileName;
  if (!preload || text.str().find(expected) == std::string::npos)
    spdlog::warn("{}/{} does not name {}: containers will not load libslice", dir, kPreloadFileName, expected);
}

}  // namespace

int main(int argc, char** argv) {
  const ParsedOptions parsed = parse_plugin_options(argc, argv);
  if (!parsed.options) {
    std::fprintf(parsed.exit_code == 0 ? stdout : stderr, "%s\n", parsed.message.c_str());
    return parsed.exit_code;
  }
  const PluginOptions& options = *parsed.options;
  auto logger = spdlog::stderr_color_mt("slice-device-plugin");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ slice-device-plugin: %v");
  spdlog::set_level(spdlog::level::from_str(options.log_level));

  std::string error;
  const auto nvml = NvmlLibrary::open(options.nvml_library, error);
  std::vector<GpuInfo> gpus;
  if (!nvml || !nvml->list_gpus(gpus, error)) {
    spdlog::error("{}", error);
    return 1;
  }
  Inventory inventory;
  if (!Inventory::build(gpus, options.layout, inventory, error)) {
    spdlog::error("{}", error);
    return 1;
  }
  if (options.list_only) {
    print_slices(inventory);
    return 0;
  }
  if (gpus.empty()) spdlog::warn("NVML sees no GPU: advertising no slices");
  for (const GpuSlices& g : inventory.gpus())
    spdlog::info("GPU {} {} {}: {} slices of {} MiB and {}%", g.gpu.index, g.gpu.uuid, g.gpu.name, g.slices,
                 g.memory_per_slice >> 20, g.share_per_slice);
  check_installed_library(options);
  // The node's coordinator folder, its root-owned policy folder and the live files of the tenants
  // that policies manage (after a reboot, the containers the kubelet restarts need them), before
  // any container can make them its own.
  std::vector<std::string> prepared, problems;
  if (!slice::prepare_machine(options.paths.host_coordinator_dir, options.paths.host_policy_dir, prepared, problems,
                              error)) {
    spdlog::error("cannot prepare the coordinator folder {} and the policy folder {}: {} (the plugin must run as root)",
                  options.paths.host_coordinator_dir, options.paths.host_policy_dir, error);
    return 1;
  }
  for (const std::string& p : problems) spdlog::warn("{}", p);
  return run_plugin(options, inventory, *nvml);
}
