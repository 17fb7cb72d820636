// NVML, loaded at run time with dlopen: slicectl, the device plugin and slice-cdi-gen link nothing of the
// NVIDIA driver, so one binary runs on every node (and on the simulated GPU's libnvidia-ml.so.1).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace slice {

struct GpuInfo {
  unsigned index = 0;  // NVML's index on this node
  std::string uuid;    // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
  std::string name;    // "NVIDIA H100 80GB HBM3"
  std::uint64_t total_bytes = 0;
};

class NvmlLibrary {
 public:
  // Opens `path` (a file name is searched as dlopen searches) and initialises NVML; nullptr and
  // `error` when either fails.
  static std::unique_ptr<NvmlLibrary> open(const std::string& path, std::string& error);
  ~NvmlLibrary();
  NvmlLibrary(const NvmlLibrary&) = delete;
  NvmlLibrary& operator=(const NvmlLibrary&) = delete;

  // Every GPU NVML sees, in NVML's order; false and `error` when a query fails.
  bool list_gpus(std::vector<GpuInfo>& out, std::string& error);
  // Whether NVML still answers for this GPU (a GPU that fell off the bus answers
  // NVML_ERROR_GPU_IS_LOST, or is no longer found by its UUID); `why` says what failed.
  bool healthy(const std::string& uuid, std::string& why);

 private:
  struct Functions;
  NvmlLibrary() = default;
  void* handle_ = nullptr;
  std::unique_ptr<Functions> fn_;
  std::string error_text(int code) const;
};

}  // namespace slice
