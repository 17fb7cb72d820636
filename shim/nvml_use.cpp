#include "own_nvml.h"

#include <dlfcn.h>
#include <unistd.h>

#include <map>
#include <mutex>

#include "log.h"
#include "nvml_api.h"
#include "shim.h"

namespace slice::shim {
namespace {

struct OwnNvml {
  decltype(&::nvmlInit_v2) init = nullptr;
  decltype(&::nvmlDeviceGetHandleByUUID) by_uuid = nullptr;
  decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) processes = nullptr;
  bool ready = false;
  std::mutex mu;  // guards devices
  std::map<std::string, nvmlDevice_t> devices;
};

// Loaded on first use, never unloaded (a hook may measure while the process exits).
OwnNvml& own() {
  static OwnNvml* nvml = [] {
    auto* n = new OwnNvml();
    void* handle = dlmopen(LM_ID_NEWLM, "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    const DlsymFn lookup = real_dlsym();
    if (handle == nullptr || lookup == nullptr) {
      const char* why = dlerror();
      log::info(std::string("libslice cannot load a copy of NVML of its own (") + (why ? why : "no dlsym") +
                "): it measures no context memory and reconciles nothing with the driver");
      return n;
    }
    n->init = reinterpret_cast<decltype(n->init)>(lookup(handle, "nvmlInit_v2"));
    n->by_uuid = reinterpret_cast<decltype(n->by_uuid)>(lookup(handle, "nvmlDeviceGetHandleByUUID"));
    n->processes = reinterpret_cast<decltype(n->processes)>(lookup(handle, "nvmlDeviceGetComputeRunningProcesses_v3"));
    n->ready = n->init != nullptr && n->by_uuid != nullptr && n->processes != nullptr && n->init() == NVML_SUCCESS;
    return n;
  }();
  return *nvml;
}

}  // namespace

std::optional<std::uint64_t> own_nvml_process_memory(const std::string& uuid) {
  OwnNvml& n = own();
  if (!n.ready) return std::nullopt;
  nvmlDevice_t device = nullptr;
  {
    std::lock_guard<std::mutex> lock(n.mu);
    auto it = n.devices.find(uuid);
    if (it == n.devices.end()) {
      if (n.by_uuid(uuid.c_str(), &device) != NVML_SUCCESS) return std::nullopt;
      it = n.devices.emplace(uuid, device).first;
    }
    device = it->second;
  }
  nvmlProcessInfo_t infos[256];
  unsigned int count = 256;
  if (n.processes(device, &count, infos) != NVML_SUCCESS) return std::nullopt;
  const unsigned int self = static_cast<unsigned int>(::getpid());
  for (unsigned int i = 0; i < count; ++i)
    if (infos[i].pid == self)
      return infos[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE_ULL ? 0 : infos[i].usedGpuMemory;
  return 0;  // not listed: nothing of this process on that device yet
}

}  // namespace slice::shim
