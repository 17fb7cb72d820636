#include "slice_health.h"

#include <spdlog/spdlog.h>

namespace slice::k8s {

SliceHealth::SliceHealth(const Inventory& inventory) : inventory_(inventory) {
  for (const GpuSlices& g : inventory.gpus()) healthy_[g.gpu.uuid] = true;
}

void SliceHealth::check(NvmlLibrary& nvml) {
  for (const GpuSlices& g : inventory_.gpus()) {
    std::string why;
    const bool now = nvml.healthy(g.gpu.uuid, why);  // outside the lock: NVML may be slow
    std::lock_guard<std::mutex> lock(mu_);
    if (healthy_[g.gpu.uuid] == now) continue;
    healthy_[g.gpu.uuid] = now;
    ++version_;
    if (now)
      spdlog::info("GPU {} ({}) answers NVML again: its {} slices are healthy", g.gpu.index, g.gpu.uuid, g.slices);
    else
      spdlog::warn("GPU {} ({}) is lost to NVML ({}): its {} slices are unhealthy", g.gpu.index, g.gpu.uuid, why,
                   g.slices);
    changed_.notify_all();
  }
}

bool SliceHealth::gpu_healthy(const std::string& uuid) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = healthy_.find(uuid);
  return it != healthy_.end() && it->second;
}

std::vector<SliceState> SliceHealth::slices(std::uint64_t* version) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SliceState> out;
  for (const GpuSlices& g : inventory_.gpus())
    for (unsigned k = 0; k < g.slices; ++k) out.push_back({slice_id(g.gpu.uuid, k), healthy_.at(g.gpu.uuid)});
  if (version != nullptr) *version = version_;
  return out;
}

void SliceHealth::wait_for_change(std::uint64_t seen, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_for(lock, timeout, [&] { return stopped_ || version_ != seen; });
}

void SliceHealth::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  stopped_ = true;
  changed_.notify_all();
}

}  // namespace slice::k8s
