#include "nvml_library.h"

#include <dlfcn.h>

namespace slice {
namespace {

// The few NVML entry points used here, with NVML's documented C signatures (nvml.h is not
// needed: handles are opaque pointers, and nvmlMemory_t is three unsigned long longs).
using nvmlDevice = void*;
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr int kNvmlSuccess = 0;
constexpr unsigned kNvmlBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE and NAME_V2 fit

}  // namespace

struct NvmlLibrary::Functions {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*by_index)(unsigned, nvmlDevice*) = nullptr;
  int (*by_uuid)(const char*, nvmlDevice*) = nullptr;
  int (*uuid)(nvmlDevice, char*, unsigned) = nullptr;
  int (*name)(nvmlDevice, char*, unsigned) = nullptr;
  int (*memory)(nvmlDevice, NvmlMemory*) = nullptr;
  const char* (*error_string)(int) = nullptr;
};

std::unique_ptr<NvmlLibrary> NvmlLibrary::open(const std::string& path, std::string& error) {
  std::unique_ptr<NvmlLibrary> lib(new NvmlLibrary());
  lib->handle_ = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib->handle_ == nullptr) {
    const char* why = ::dlerror();
    error = "cannot load NVML (" + path + "): " + (why ? why : "unknown error") +
            " (is the NVIDIA driver installed, and its library on the loader's path?)";
    return nullptr;
  }
  lib->fn_ = std::make_unique<Functions>();
  Functions& f = *lib->fn_;
  // `_v2` entry points where NVML has them, as nvml.h maps the plain names to them.
  const struct {
    const char* symbol;
    void** slot;
  } table[] = {
      {"nvmlInit_v2", reinterpret_cast<void**>(&f.init)},
      {"nvmlShutdown", reinterpret_cast<void**>(&f.shutdown)},
      {"nvmlDeviceGetCount_v2", reinterpret_cast<void**>(&f.count)},
      {"nvmlDeviceGetHandleByIndex_v2", reinterpret_cast<void**>(&f.by_index)},
      {"nvmlDeviceGetHandleByUUID", reinterpret_cast<void**>(&f.by_uuid)},
      {"nvmlDeviceGetUUID", reinterpret_cast<void**>(&f.uuid)},
      {"nvmlDeviceGetName", reinterpret_cast<void**>(&f.name)},
      {"nvmlDeviceGetMemoryInfo", reinterpret_cast<void**>(&f.memory)},
      {"nvmlErrorString", reinterpret_cast<void**>(&f.error_string)},
  };
  for (const auto& entry : table) {
    *entry.slot = ::dlsym(lib->handle_, entry.symbol);
    if (*entry.slot == nullptr) {
      error = path + " has no " + entry.symbol + " (an NVML too old for this plugin)";
      return nullptr;
    }
  }
  if (const int rc = f.init(); rc != kNvmlSuccess) {
    error = "nvmlInit failed: " + lib->error_text(rc);
    f.init = nullptr;  // nothing to shut down
    return nullptr;
  }
  return lib;
}

NvmlLibrary::~NvmlLibrary() {
  if (fn_ && fn_->init != nullptr) fn_->shutdown();
  if (handle_ != nullptr) ::dlclose(handle_);
}

std::string NvmlLibrary::error_text(int code) const {
  const char* text = fn_ && fn_->error_string ? fn_->error_string(code) : nullptr;
  return (text ? std::string(text) : std::string("error")) + " (" + std::to_string(code) + ")";
}

bool NvmlLibrary::list_gpus(std::vector<GpuInfo>& out, std::string& error) {
  out.clear();
  unsigned count = 0;
  if (const int rc = fn_->count(&count); rc != kNvmlSuccess) {
    error = "nvmlDeviceGetCount failed: " + error_text(rc);
    return false;
  }
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice device = nullptr;
    char uuid[kNvmlBufferSize] = {};
    char name[kNvmlBufferSize] = {};
    NvmlMemory memory{};
    int rc = fn_->by_index(i, &device);
    if (rc == kNvmlSuccess) rc = fn_->uuid(device, uuid, sizeof uuid);
    if (rc == kNvmlSuccess) rc = fn_->name(device, name, sizeof name);
    if (rc == kNvmlSuccess) rc = fn_->memory(device, &memory);
    if (rc != kNvmlSuccess) {
      error = "NVML could not describe GPU " + std::to_string(i) + ": " + error_text(rc);
      return false;
    }
    out.push_back(GpuInfo{i, uuid, name, memory.total});
  }
  return true;
}

bool NvmlLibrary::healthy(const std::string& uuid, std::string& why) {
  nvmlDevice device = nullptr;
  NvmlMemory memory{};
  int rc = fn_->by_uuid(uuid.c_str(), &device);
  if (rc == kNvmlSuccess) rc = fn_->memory(device, &memory);
  if (rc == kNvmlSuccess) return true;
  why = error_text(rc);
  return false;
}

}  // namespace slice
