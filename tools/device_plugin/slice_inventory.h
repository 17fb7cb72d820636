// The slices a node advertises: every GPU cut into N equal slices, each worth an equal part of the
// GPU's memory (after a reserve that is kept back for the driver and contexts) and of its time.
// A slice's ID is "<GPU-UUID>::<k>", k = 0..N-1: at most 44 characters, within the 63 the kubelet
// allows, and the GPU it lies on can be read back from it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "nvml_library.h"

namespace slice::k8s {

inline constexpr unsigned kMaxSlicesPerGpu = 100;  // a share of 1% is the finest libslice knows
inline constexpr std::size_t kMaxDeviceIdLength = 63;

struct SliceLayout {
  unsigned slices_per_gpu = 4;
  std::uint64_t reserve_bytes = 0;  // per GPU, not handed out
};

struct GpuSlices {
  GpuInfo gpu;
  std::uint64_t memory_per_slice = 0;  // bytes, whole MiB
  unsigned share_per_slice = 0;        // percent of device time, 1-100
  unsigned slices = 0;
};

struct SliceId {
  std::string gpu_uuid;
  unsigned index = 0;
};

std::string slice_id(const std::string& gpu_uuid, unsigned index);
std::optional<SliceId> parse_slice_id(const std::string& id);

class Inventory {
 public:
  // false and `error` when a GPU is too small for the reserve and the slices (each slice needs at
  // least 1 MiB) or the layout is out of range.
  static bool build(const std::vector<GpuInfo>& gpus, const SliceLayout& layout, Inventory& out, std::string& error);

  const std::vector<GpuSlices>& gpus() const { return gpus_; }
  const GpuSlices* gpu(const std::string& uuid) const;
  // Every slice ID, GPU by GPU in NVML order, slices in index order.
  std::vector<std::string> slice_ids() const;
  // Whether the ID names a slice of this inventory.
  bool contains(const std::string& id) const;

 private:
  std::vector<GpuSlices> gpus_;
};

// How many slices of each GPU a set of slice IDs holds (UUID -> count); false and `error` on an
// ID that is not one of the inventory's, or that appears twice.
bool slices_by_gpu(const Inventory& inventory, const std::vector<std::string>& ids,
                   std::map<std::string, unsigned>& out, std::string& error);

}  // namespace slice::k8s
