// What a container that holds slices gets, for the device plugin's Allocate and for the CDI spec
// alike: the GPUs, libslice's variables keyed by GPU UUID, the mounts that load libslice.so in
// every process and share the node's coordinator, and the owner's policy for the container's tenant.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "policy.h"
#include "slice_inventory.h"
#include "config_values.h"

namespace slice::k8s {

// Where things are on the node (host) and in the container.
struct EditPaths {
  std::string host_coordinator_dir = SLICE_DEFAULT_COORDINATOR_DIR;  // libslice's default, so host processes join too
  std::string container_coordinator_dir = "/run/libslice";
  // The owner's policies: persistent on the node, read-only in the container.
  std::string host_policy_dir = SLICE_DEFAULT_POLICY_DIR;  // libslice's default (SLICE_POLICY_DIR)
  std::string container_policy_dir = SLICE_DEFAULT_POLICY_DIR;
  std::string host_lib_dir = "/var/lib/libslice";  // libslice.so and ld.so.preload, from the init container
  std::string container_lib_dir = "/usr/local/libslice";
};

inline constexpr const char* kPreloadFileName = "ld.so.preload";
inline constexpr const char* kLibraryFileName = "libslice.so";

struct MountEdit {
  std::string host_path;
  std::string container_path;
  bool read_only = true;
};

struct ContainerEdits {
  std::map<std::string, std::string> env;
  std::vector<MountEdit> mounts;
  std::vector<std::string> gpu_uuids;  // the GPUs the slices lie on, in inventory order
  Policy policy;                       // the owner's limits, written for the tenant by the plugin
};

// Edits for a container holding `slices` (GPU UUID -> number of its slices). `tenant` becomes
// SLICE_TENANT; empty leaves it to libslice (a unique tenant per process tree, as for CDI users).
ContainerEdits container_edits(const Inventory& inventory, const std::map<std::string, unsigned>& slices,
                               const EditPaths& paths, const std::string& tenant);

// The tenant of an allocation: a valid libslice tenant name that only this set of slices gives
// ("k8s-<last 8 hex digits of the GPU UUID>-<slice indices>", or a hash of the IDs where that
// does not fit or the slices span GPUs). Two containers that hold slices at the same time never
// share one, because the kubelet never hands one slice to two.
std::string tenant_for_slices(const std::vector<std::string>& ids);

}  // namespace slice::k8s
