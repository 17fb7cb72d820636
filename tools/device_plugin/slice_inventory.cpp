#include "slice_inventory.h"

#include <set>

namespace slice::k8s {
namespace {
constexpr std::string_view kSeparator = "::";
constexpr std::uint64_t kMiB = 1ull << 20;
}  // namespace

std::string slice_id(const std::string& gpu_uuid, unsigned index) {
  return gpu_uuid + std::string(kSeparator) + std::to_string(index);
}

std::optional<SliceId> parse_slice_id(const std::string& id) {
  const auto at = id.rfind(kSeparator);
  if (at == std::string::npos || at == 0) return std::nullopt;
  const std::string digits = id.substr(at + kSeparator.size());
  if (digits.empty() || digits.size() > 3 || (digits.size() > 1 && digits[0] == '0')) return std::nullopt;
  unsigned index = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    index = index * 10 + static_cast<unsigned>(c - '0');
  }
  return SliceId{id.substr(0, at), index};
}

bool Inventory::build(const std::vector<GpuInfo>& gpus, const SliceLayout& layout, Inventory& out, std::string& error) {
  if (layout.slices_per_gpu < 1 || layout.slices_per_gpu > kMaxSlicesPerGpu) {
    error = "slices per GPU must be 1 to " + std::to_string(kMaxSlicesPerGpu);
    return false;
  }
  out.gpus_.clear();
  for (const GpuInfo& gpu : gpus) {
    if (slice_id(gpu.uuid, layout.slices_per_gpu - 1).size() > kMaxDeviceIdLength) {
      error = "GPU " + std::to_string(gpu.index) + "'s UUID '" + gpu.uuid + "' makes slice IDs longer than " +
              std::to_string(kMaxDeviceIdLength) + " characters";
      return false;
    }
    if (gpu.total_bytes <= layout.reserve_bytes ||
        (gpu.total_bytes - layout.reserve_bytes) / layout.slices_per_gpu < kMiB) {
      error = "GPU " + std::to_string(gpu.index) + " (" + gpu.uuid + ") has " + std::to_string(gpu.total_bytes) +
              " bytes: too little for a reserve of " + std::to_string(layout.reserve_bytes) + " bytes and " +
              std::to_string(layout.slices_per_gpu) + " slices";
      return false;
    }
    GpuSlices g;
    g.gpu = gpu;
    g.slices = layout.slices_per_gpu;
    // Whole MiB, so that N slices never add up to more than the GPU has.
    g.memory_per_slice = (gpu.total_bytes - layout.reserve_bytes) / layout.slices_per_gpu / kMiB * kMiB;
    g.share_per_slice = 100 / layout.slices_per_gpu;
    out.gpus_.push_back(std::move(g));
  }
  return true;
}

const GpuSlices* Inventory::gpu(const std::string& uuid) const {
  for (const GpuSlices& g : gpus_)
    if (g.gpu.uuid == uuid) return &g;
  return nullptr;
}

std::vector<std::string> Inventory::slice_ids() const {
  std::vector<std::string> ids;
  for (const GpuSlices& g : gpus_)
    for (unsigned k = 0; k < g.slices; ++k) ids.push_back(slice_id(g.gpu.uuid, k));
  return ids;
}

bool Inventory::contains(const std::string& id) const {
  const auto parsed = parse_slice_id(id);
  if (!parsed) return false;
  const GpuSlices* g = gpu(parsed->gpu_uuid);
  return g != nullptr && parsed->index < g->slices && slice_id(parsed->gpu_uuid, parsed->index) == id;
}

bool slices_by_gpu(const Inventory& inventory, const std::vector<std::string>& ids,
                   std::map<std::string, unsigned>& out, std::string& error) {
  out.clear();
  std::set<std::string> seen;
  for (const std::string& id : ids) {
    if (!inventory.contains(id)) {
      error = "'" + id + "' is not a slice of this node";
      return false;
    }
    if (!seen.insert(id).second) {
      error = "slice '" + id + "' is asked for twice";
      return false;
    }
    ++out[parse_slice_id(id)->gpu_uuid];
  }
  return true;
}

}  // namespace slice::k8s
