// Which slices a container should get: GetPreferredAllocation's answer. A container's slices are
// packed onto one GPU where they fit, because libslice caps and shares per GPU and a program sees
// its memory per device: two slices on two GPUs are two small GPUs, not one larger slice.
#pragma once

#include <string>
#include <vector>

#include "slice_inventory.h"

namespace slice::k8s {

// `size` slices out of `available`, always including every ID of `must_include` (the kubelet's
// rule). The rest are taken from the GPU that already holds the must-include slices, else from the
// GPU with the fewest free slices that still fits the whole request (keeping larger holes for
// larger requests), else from the GPUs with the most free slices first. IDs that are not the
// inventory's are never chosen. Fewer than `size` come back only when too few are available.
std::vector<std::string> preferred_allocation(const Inventory& inventory, const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include, std::size_t size);

}  // namespace slice::k8s
