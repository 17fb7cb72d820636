#include "allocation_policy.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace slice::k8s {

std::vector<std::string> preferred_allocation(const Inventory& inventory, const std::vector<std::string>& available,
                                              const std::vector<std::string>& must_include, std::size_t size) {
  std::vector<std::string> chosen;
  std::set<std::string> taken;
  std::map<std::string, unsigned> held;  // GPU -> must-include slices on it
  for (const std::string& id : must_include) {
    if (!taken.insert(id).second) continue;
    chosen.push_back(id);
    if (const auto parsed = parse_slice_id(id)) ++held[parsed->gpu_uuid];
  }

  // The free slices of each GPU, in slice order (available IDs may come in any order).
  std::map<std::string, std::vector<SliceId>> free_by_gpu;
  for (const std::string& id : available) {
    if (taken.contains(id) || !inventory.contains(id)) continue;
    const SliceId parsed = *parse_slice_id(id);
    free_by_gpu[parsed.gpu_uuid].push_back(parsed);
  }
  for (auto& [gpu, slices] : free_by_gpu)
    std::sort(slices.begin(), slices.end(), [](const SliceId& a, const SliceId& b) { return a.index < b.index; });

  // GPUs in the order they should be filled.
  std::vector<std::string> order;
  for (const auto& [gpu, slices] : free_by_gpu) order.push_back(gpu);
  const std::size_t wanted = size > chosen.size() ? size - chosen.size() : 0;
  auto rank = [&](const std::string& gpu) {
    const std::size_t free = free_by_gpu[gpu].size();
    const unsigned holds = held.contains(gpu) ? held[gpu] : 0;
    const bool fits = free >= wanted;
    // Smaller tuples first: GPUs holding must-include slices (most first), then GPUs that fit the
    // request (tightest first), then the rest (largest first).
    const long long tightness = holds > 0 ? -static_cast<long long>(holds)
                                          : (fits ? static_cast<long long>(free) : -static_cast<long long>(free));
    return std::pair<int, long long>(holds > 0 ? 0 : (fits ? 1 : 2), tightness);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });

  for (const std::string& gpu : order) {
    for (const SliceId& s : free_by_gpu[gpu]) {
      if (chosen.size() >= size) return chosen;
      chosen.push_back(slice_id(s.gpu_uuid, s.index));
    }
  }
  return chosen;
}

}  // namespace slice::k8s
