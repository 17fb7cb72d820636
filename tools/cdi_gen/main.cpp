// slice-cdi-gen: writes a CDI spec of libslice slices for podman, containerd and CRI-O users
// outside Kubernetes; also the spec's createRuntime hook (--prepare-coordinator DIR).
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "cdi_spec.h"
#include "nvml_library.h"
#include "policy.h"
#include "quantity.h"
#include "tenant_file.h"
#include "config_values.h"

namespace {

using namespace slice::k8s;
using slice::GpuInfo;
using slice::NvmlLibrary;

constexpr const char* kUsage =
    "usage: slice-cdi-gen [OPTION...]\n"
    "Writes a Container Device Interface spec with one device per GPU and slice count: gpuI-CofN is C of\n"
    "the N equal slices of GPU I (memory after the reserve, and device time), enforced by libslice.so.\n"
    "  podman run --device nvidia.com/gpu=0 --device libslice.io/slice=gpu0-2of4 IMAGE ...\n\n"
    "  --output PATH                   where to write it; - for standard output (default /var/run/cdi/libslice.json);\n"
    "                                  writing a file also makes the folders the spec mounts (as root)\n"
    "  --slices N                      slices per GPU, 1-100 (default 4)\n"
    "  --memory-reserve Q              memory per GPU kept out of the slices, e.g. 512Mi (default 0)\n"
    "  --kind VENDOR/CLASS             the devices' CDI kind (default libslice.io/slice)\n"
    "  --nvml-library PATH             NVML to load (default libnvidia-ml.so.1)\n"
    "  --coordinator-dir DIR           the host's libslice coordinator folder (default " SLICE_DEFAULT_COORDINATOR_DIR
    ")\n"
    "  --container-coordinator-dir DIR where containers see it (default /run/libslice)\n"
    "  --policy-dir DIR                the host's persistent policy folder (default " SLICE_DEFAULT_POLICY_DIR
    ")\n"
    "  --container-policy-dir DIR      where containers see it, read-only (default " SLICE_DEFAULT_POLICY_DIR
    ")\n"
    "  --host-lib-dir DIR              host folder with libslice.so and ld.so.preload (default /var/lib/libslice)\n"
    "  --container-lib-dir DIR         where containers see libslice.so (default /usr/local/libslice)\n"
    "  --hook-path PATH                this program's path for the hook (default: where it runs from)\n"
    "  --prepare-coordinator DIR       (the hook) make DIR a coordinator folder, with root-owned live files for\n"
    "                                  the tenants that policies in --policy-dir manage\n"
    "  --help                          this text\n"
    "Exit status: 0 done, 1 could not be done, 2 a wrong command line.\n";

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "slice-cdi-gen: %s (see --help)\n", message.c_str());
  std::exit(2);
}

std::string absolute(const std::string& flag, const std::string& value) {
  if (value.empty() || value[0] != '/') usage_error(flag + " '" + value + "' must be an absolute path");
  return value;
}

std::string own_path() {
  char path[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<std::size_t>(n)) : std::string("/usr/local/bin/slice-cdi-gen");
}

}  // namespace

int main(int argc, char** argv) {
  std::string output = "/var/run/cdi/libslice.json";
  std::string nvml_path = "libnvidia-ml.so.1";
  std::string prepare;
  SliceLayout layout;
  CdiOptions options;
  options.hook_path = own_path();
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (i + 1 >= argc) usage_error(flag.starts_with("--") ? flag + " needs a value" : "unexpected '" + flag + "'");
    const std::string value = argv[++i];
    if (flag == "--output")
      output = value;
    else if (flag == "--slices") {
      char* end = nullptr;
      const long n = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || n < 1 || n > static_cast<long>(kMaxSlicesPerGpu))
        usage_error("--slices '" + value + "' must be a whole number from 1 to 100, e.g. 4");
      layout.slices_per_gpu = static_cast<unsigned>(n);
    } else if (flag == "--memory-reserve") {
      const auto q = slice::parse_byte_quantity(value);
      if (!q) usage_error("--memory-reserve '" + value + "': " + q.reason + " (e.g. 512Mi)");
      layout.reserve_bytes = *q.value;
    } else if (flag == "--kind") {
      const auto slash = value.find('/');
      if (slash == std::string::npos || slash == 0 || slash + 1 == value.size() ||
          value.find('/', slash + 1) != std::string::npos)
        usage_error("--kind '" + value + "' must be VENDOR/CLASS, e.g. libslice.io/slice");
      options.kind = value;
    } else if (flag == "--nvml-library")
      nvml_path = value;
    else if (flag == "--coordinator-dir")
      options.paths.host_coordinator_dir = absolute(flag, value);
    else if (flag == "--container-coordinator-dir")
      options.paths.container_coordinator_dir = absolute(flag, value);
    else if (flag == "--policy-dir")
      options.paths.host_policy_dir = absolute(flag, value);
    else if (flag == "--container-policy-dir")
      options.paths.container_policy_dir = absolute(flag, value);
    else if (flag == "--host-lib-dir")
      options.paths.host_lib_dir = absolute(flag, value);
    else if (flag == "--container-lib-dir")
      options.paths.container_lib_dir = absolute(flag, value);
    else if (flag == "--hook-path")
      options.hook_path = absolute(flag, value);
    else if (flag == "--prepare-coordinator")
      prepare = absolute(flag, value);
    else
      usage_error("unknown option '" + flag + "'");
  }

  std::string error;
  if (!prepare.empty()) {
    // The hook: runs on the host once the container's mounts are made (createRuntime), so it cannot
    // make their sources; writing the spec below does, and so does `slicectl prepare` at boot. It
    // makes sure that the live files of tenants that policies manage are root's.
    std::vector<std::string> prepared, problems;
    const bool ok = geteuid() == 0
                        ? slice::prepare_machine(prepare, options.paths.host_policy_dir, prepared, problems, error)
                        : slice::prepare_coordinator_dir(prepare, error);
    if (!ok) {
      std::fprintf(stderr, "slice-cdi-gen: cannot prepare %s: %s\n", prepare.c_str(), error.c_str());
      return 1;
    }
    for (const std::string& p : problems) std::fprintf(stderr, "slice-cdi-gen: %s\n", p.c_str());
    return 0;
  }

  const auto nvml = NvmlLibrary::open(nvml_path, error);
  std::vector<GpuInfo> gpus;
  Inventory inventory;
  if (!nvml || !nvml->list_gpus(gpus, error) || !Inventory::build(gpus, layout, inventory, error)) {
    std::fprintf(stderr, "slice-cdi-gen: %s\n", error.c_str());
    return 1;
  }
  const std::string spec = cdi_spec_json(inventory, options);
  if (output == "-") {
    std::fputs(spec.c_str(), stdout);
    return 0;
  }
  // The spec's bind mounts need their sources before any container starts (its hook runs too late
  // to make them): the coordinator folder and the policy folder, made here as the spec is written.
  std::vector<std::string> prepared, problems;
  if (!slice::prepare_machine(options.paths.host_coordinator_dir, options.paths.host_policy_dir, prepared, problems,
                              error)) {
    std::fprintf(stderr, "slice-cdi-gen: cannot prepare %s and %s, which the spec mounts: %s (run as root)\n",
                 options.paths.host_coordinator_dir.c_str(), options.paths.host_policy_dir.c_str(), error.c_str());
    return 1;
  }
  for (const std::string& p : problems) std::fprintf(stderr, "slice-cdi-gen: %s\n", p.c_str());
  // Written beside and renamed, so that a runtime reading the folder never sees half a spec.
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(output).parent_path(), ec);
  // A new file of a name nobody could have planted (mkstemp: O_EXCL, never through a link): a fixed
  // OUTPUT.tmp could be a link to a file of root's, which root would overwrite.
  std::string temporary = output + ".XXXXXX";
  const int fd = mkstemp(temporary.data());
  if (fd < 0 || fchmod(fd, 0644) != 0 || write(fd, spec.data(), spec.size()) != static_cast<ssize_t>(spec.size()) ||
      fsync(fd) != 0) {
    std::fprintf(stderr, "slice-cdi-gen: cannot write %s: %s\n", temporary.c_str(), std::strerror(errno));
    if (fd >= 0) {
      close(fd);
      std::remove(temporary.c_str());
    }
    return 1;
  }
  close(fd);
  if (std::rename(temporary.c_str(), output.c_str()) != 0) {
    std::fprintf(stderr, "slice-cdi-gen: cannot rename %s to %s\n", temporary.c_str(), output.c_str());
    std::remove(temporary.c_str());
    return 1;
  }
  std::fprintf(stderr, "slice-cdi-gen: %zu GPUs, %u slices each: %s\n", inventory.gpus().size(), layout.slices_per_gpu,
               output.c_str());
  return 0;
}
