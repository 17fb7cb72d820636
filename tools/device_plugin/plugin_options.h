// slice-device-plugin's command line: every flag, its default, and its help text in one table.
#pragma once

#include <optional>
#include <string>

#include "container_edits.h"
#include "slice_inventory.h"

namespace slice::k8s {

enum class DeviceListStrategy { envvar, cdi };

struct PluginOptions {
  std::string resource_name = "libslice.io/gpu-slice";
  SliceLayout layout;
  std::string device_plugin_dir = "/var/lib/kubelet/device-plugins";
  std::string kubelet_socket;  // empty: <device_plugin_dir>/kubelet.sock
  std::string socket_name = "libslice-gpu-slice.sock";
  std::string nvml_library = "libnvidia-ml.so.1";
  DeviceListStrategy device_list = DeviceListStrategy::envvar;
  std::string cdi_kind = "nvidia.com/gpu";
  bool single_gpu_only = false;
  EditPaths paths;
  std::optional<unsigned> tenant_group;  // group that may write a container's tenant file
  double health_interval_s = 5;
  std::string log_level = "info";
  bool list_only = false;  // --list: print the slices and exit

  std::string kubelet_socket_path() const {
    return kubelet_socket.empty() ? device_plugin_dir + "/kubelet.sock" : kubelet_socket;
  }
  std::string socket_path() const { return device_plugin_dir + "/" + socket_name; }
};

struct ParsedOptions {
  std::optional<PluginOptions> options;  // nullopt: exit with `exit_code` after printing `message`
  int exit_code = 0;                     // 0 after --help, 2 for a wrong command line
  std::string message;
};

ParsedOptions parse_plugin_options(int argc, char** argv);
std::string plugin_usage();

}  // namespace slice::k8s
