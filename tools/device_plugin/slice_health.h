// Health of each GPU's slices, shared between the thread that asks NVML and the ListAndWatch
// streams that report it: a change bumps a version that the streams wait on.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "nvml_library.h"
#include "slice_inventory.h"

namespace slice::k8s {

struct SliceState {
  std::string id;
  bool healthy = true;
};

class SliceHealth {
 public:
  explicit SliceHealth(const Inventory& inventory);

  // Asks NVML about every GPU once; logs and records each change.
  void check(NvmlLibrary& nvml);
  bool gpu_healthy(const std::string& uuid) const;
  // Every slice with its GPU's health, and the version it belongs to.
  std::vector<SliceState> slices(std::uint64_t* version) const;
  // Waits until the version differs from `seen`, `stop()` is called, or `timeout` passes.
  void wait_for_change(std::uint64_t seen, std::chrono::milliseconds timeout) const;
  void stop();

 private:
  const Inventory& inventory_;
  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::map<std::string, bool> healthy_;  // GPU UUID -> healthy
  std::uint64_t version_ = 1;
  bool stopped_ = false;
};

}  // namespace slice::k8s
