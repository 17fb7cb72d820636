// A Container Device Interface spec of libslice slices: one device per GPU and slice count
// ("gpu0-2of4": two quarters of GPU 0), each with the edits a container needs (the GPU, libslice's
// variables keyed by UUID, libslice.so loaded through /etc/ld.so.preload, the node's coordinator)
// and a createRuntime hook that prepares the coordinator folder on the host before it is mounted.
#pragma once

#include <string>

#include "container_edits.h"
#include "slice_inventory.h"

namespace slice::k8s {

struct CdiOptions {
  std::string kind = "libslice.io/slice";
  EditPaths paths;
  std::string hook_path;  // this program, run as the hook with --prepare-coordinator DIR
};

// The spec as JSON text.
std::string cdi_spec_json(const Inventory& inventory, const CdiOptions& options);

// The lowest CDI version whose features the spec uses: 0.3.0 unless a device name starts with a
// digit (0.5.0). Names here start with "gpu", and mounts carry no type (0.4.0), so 0.3.0.
std::string required_cdi_version(const Inventory& inventory);

std::string cdi_device_name(unsigned gpu_index, unsigned count, unsigned slices_per_gpu);

}  // namespace slice::k8s
