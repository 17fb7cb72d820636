#include "plugin_options.h"

#include <grp.h>

#include <cstdlib>
#include <functional>
#include <string_view>
#include <vector>

#include "quantity.h"
#include "config_values.h"

namespace slice::k8s {
namespace {

using Setter = std::function<std::optional<std::string>(PluginOptions&, const std::string&)>;  // error

struct Flag {
  std::string_view name;
  std::string_view value;  // "" for a switch
  std::string_view help;
  Setter set;
};

std::optional<std::string> set_string(std::string& field, const std::string& value) {
  if (value.empty()) return "must not be empty";
  field = value;
  return std::nullopt;
}

std::optional<std::string> set_absolute(std::string& field, const std::string& value) {
  if (value.empty() || value[0] != '/') return "must be an absolute path";
  field = value;
  return std::nullopt;
}

// A name with a domain: DOMAIN/NAME (a resource) or VENDOR/CLASS (a CDI kind).
std::optional<std::string> set_qualified(std::string& field, const std::string& value, const char* why) {
  if (value.find('/') == std::string::npos) return why;
  field = value;
  return std::nullopt;
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"--resource-name", "NAME", "extended resource the slices are advertised as (default libslice.io/gpu-slice)",
       [](PluginOptions& o, const std::string& v) {
         return set_qualified(o.resource_name, v, "must be DOMAIN/NAME, e.g. libslice.io/gpu-slice");
       }},
      {"--slices", "N",
       "slices per GPU, 1-100; each is 1/N of the GPU's memory (after the reserve) and time (default 4)",
       [](PluginOptions& o, const std::string& v) -> std::optional<std::string> {
         char* end = nullptr;
         const long n = std::strtol(v.c_str(), &end, 10);
         if (v.empty() || *end != '\0' || n < 1 || n > static_cast<long>(kMaxSlicesPerGpu))
           return "must be a whole number from 1 to 100, e.g. 4";
         o.layout.slices_per_gpu = static_cast<unsigned>(n);
         return std::nullopt;
       }},
      {"--memory-reserve", "Q", "memory per GPU kept out of the slices, a quantity such as 512Mi (default 0)",
       [](PluginOptions& o, const std::string& v) -> std::optional<std::string> {
         const auto q = parse_byte_quantity(v);
         if (!q) return q.reason + " (e.g. 512Mi)";
         o.layout.reserve_bytes = *q.value;
         return std::nullopt;
       }},
      {"--device-plugin-dir", "DIR",
       "the kubelet's device-plugin folder, where the plugin's socket goes "
       "(default /var/lib/kubelet/device-plugins)",
       [](PluginOptions& o, const std::string& v) { return set_absolute(o.device_plugin_dir, v); }},
      {"--kubelet-socket", "PATH", "the kubelet's registration socket (default DIR/kubelet.sock)",
       [](PluginOptions& o, const std::string& v) { return set_absolute(o.kubelet_socket, v); }},
      {"--socket-name", "NAME", "the plugin's socket file in DIR (default libslice-gpu-slice.sock)",
       [](PluginOptions& o, const std::string& v) -> std::optional<std::string> {
         if (v.empty() || v.find('/') != std::string::npos) return "must be a file name without '/'";
         o.socket_name = v;
         return std::nullopt;
       }},
      {"--nvml-library", "PATH", "NVML to load (default libnvidia-ml.so.1, found as the loader finds it)",
       [](PluginOptions& o, const std::string& v) { return set_string(o.nvml_library, v); }},
      {"--device-list-strategy", "envvar|cdi",
       "how a container is given its GPUs: NVIDIA_VISIBLE_DEVICES with "
       "UUIDs (for the NVIDIA container runtime), or CDI device names KIND=UUID (default envvar)",
       [](PluginOptions& o, const std::string& v) -> std::optional<std::string> {
         if (v == "envvar")
           o.device_list = DeviceListStrategy::envvar;
         else if (v == "cdi")
           o.device_list = DeviceListStrategy::cdi;
         else
           return "must be envvar or cdi";
         return std::nullopt;
       }},
      {"--cdi-kind", "KIND", "CDI kind of the GPUs for --device-list-strategy cdi (default nvidia.com/gpu)",
       [](PluginOptions& o, const std::string& v) {
         return set_qualified(o.cdi_kind, v, "must be VENDOR/CLASS, e.g. nvidia.com/gpu");
       }},
      {"--single-gpu-only", "", "refuse an allocation whose slices lie on more than one GPU",
       [](PluginOptions& o, const std::string&) -> std::optional<std::string> {
         o.single_gpu_only = true;
         return std::nullopt;
       }},
      {"--coordinator-dir", "DIR",
       "the node's libslice coordinator folder, shared by every container "
       "(default " SLICE_DEFAULT_COORDINATOR_DIR ")",
       [](PluginOptions& o, const std::string& v) { return set_absolute(o.paths.host_coordinator_dir, v); }},
      {"--container-coordinator-dir", "DIR", "where containers see it (default /run/libslice)",
       [](PluginOptions& o, const std::string& v) { return set_absolute(o.paths.container_coordinator_dir, v); }},
      {"--policy-dir", "DIR",
       "the node's persistent policy folder, where the plugin writes each container's "
       "limits (default " SLICE_DEFAULT_POLICY_DIR ")",
       [](PluginOptions& o, const std::string& v) { return set_absolute(o.paths.host_policy_dir, v); }},
      {"--container-policy-dir", "DIR", "where containers see it, read-only (default " SLICE_DEFAULT_POLICY_DIR ")",
       [](PluginOptions& o, const std::string& v) { return set_absolute(o.paths.container_policy_dir, v); }},
      {"--host-lib-dir", "DIR", "node folder holding libslice.so and ld.so.preload (default /var/lib/libslice)",
       [](PluginOptions& o, const std::string& v) { return set_absolute(o.paths.host_lib_dir, v); }},
      {"--container-lib-dir", "DIR",
       "where containers see libslice.so; ld.so.preload must name "
       "DIR/libslice.so (default /usr/local/libslice)",
       [](PluginOptions& o, const std::string& v) { return set_absolute(o.paths.container_lib_dir, v); }},
      {"--tenant-group", "GROUP",
       "group (name or number) that may write a container's tenant file: "
       "containers that run as non-root users need it as a supplemental group (default: root only)",
       [](PluginOptions& o, const std::string& v) -> std::optional<std::string> {
         char* end = nullptr;
         const unsigned long n = std::strtoul(v.c_str(), &end, 10);
         if (!v.empty() && *end == '\0') {
           o.tenant_group = static_cast<unsigned>(n);
         } else if (const struct group* g = ::getgrnam(v.c_str())) {
           o.tenant_group = static_cast<unsigned>(g->gr_gid);
         } else {
           return "is no group name or number";
         }
         return std::nullopt;
       }},
      {"--health-interval", "SECONDS", "how often NVML is asked whether each GPU is still there (default 5)",
       [](PluginOptions& o, const std::string& v) -> std::optional<std::string> {
         char* end = nullptr;
         const double s = std::strtod(v.c_str(), &end);
         if (v.empty() || *end != '\0' || !(s >= 0.05 && s <= 3600)) return "must be 0.05 to 3600, e.g. 5";
         o.health_interval_s = s;
         return std::nullopt;
       }},
      {"--log-level", "LEVEL", "trace, debug, info, warn, error or off (default info)",
       [](PluginOptions& o, const std::string& v) -> std::optional<std::string> {
         for (const char* level : {"trace", "debug", "info", "warn", "error", "off"})
           if (v == level) {
             o.log_level = v;
             return std::nullopt;
           }
         return "must be trace, debug, info, warn, error or off";
       }},
      {"--list", "", "print the slices this node would advertise (ID, GPU, memory, share) and exit",
       [](PluginOptions& o, const std::string&) -> std::optional<std::string> {
         o.list_only = true;
         return std::nullopt;
       }},
  };
  return table;
}

}  // namespace

std::string plugin_usage() {
  std::string text =
      "usage: slice-device-plugin [OPTION...]\n"
      "Kubernetes device plugin (API v1beta1) that advertises libslice GPU slices: N per GPU, each an equal\n"
      "part of the GPU's memory and time, enforced in the container by libslice.so.\n\n";
  for (const Flag& f : flags()) {
    std::string head = "  " + std::string(f.name) + (f.value.empty() ? "" : " " + std::string(f.value));
    if (head.size() < 34)
      head.resize(34, ' ');
    else
      head += "\n" + std::string(34, ' ');
    text += head + std::string(f.help) + "\n";
  }
  text +=
      "  --help                          this text\n\n"
      "Exit status: 0 after SIGTERM or --list, 1 on a failure to start, 2 on a wrong command line.\n";
  return text;
}

ParsedOptions parse_plugin_options(int argc, char** argv) {
  PluginOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") return {std::nullopt, 0, plugin_usage()};
    std::string value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags())
      if (f.name == arg) flag = &f;
    if (flag == nullptr) return {std::nullopt, 2, "slice-device-plugin: unknown option '" + arg + "' (see --help)"};
    if (flag->value.empty()) {
      if (has_value) return {std::nullopt, 2, "slice-device-plugin: " + arg + " takes no value"};
    } else if (!has_value) {
      if (i + 1 >= argc)
        return {std::nullopt, 2, "slice-device-plugin: " + arg + " needs a value (" + std::string(flag->value) + ")"};
      value = argv[++i];
    }
    if (auto error = flag->set(options, value))
      return {std::nullopt, 2, "slice-device-plugin: " + arg + " '" + value + "' " + *error};
  }
  return {options, 0, {}};
}

}  // namespace slice::k8s
