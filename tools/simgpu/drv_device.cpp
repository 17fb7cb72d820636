// Initialisation, versions, devices and their attributes, error names.
#include <pthread.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "driver.h"
#include "drv_thread.h"
#include "violations.h"
#include "sim_identity.h"
#include "visible_devices.h"

namespace simgpu {

namespace {
Driver* g_driver = new Driver();  // replaced, never destroyed: executor threads may outlive main

void on_fork_child() {
  // A forked child shares the parent's state-file description; let go of it and start afresh
  // (CUDA itself is unusable in a child forked after initialisation, as on the real driver).
  if (g_driver->machine) g_driver->machine->forget_after_fork();
  forget_device_memory_after_fork();  // the child has no mapping of the parent's shareable memory
  g_driver = new Driver();
}

__attribute__((destructor)) void on_unload() {
  // A normal exit gives the memory back at once, as the real driver does at process teardown.
  if (g_driver && g_driver->machine) g_driver->machine->release_own_slot();
}
}  // namespace

Driver& driver() { return *g_driver; }

void report_destroyed_use(const char* function, const void* handle) {
  static const char* const kNames[] = {"context",     "stream",
                                       "event",       "module",
                                       "function",    "graph",
                                       "graph node",  "executable graph",
                                       "memory pool", "physical allocation",
                                       "array",       "mipmapped array"};
  const auto it = driver().destroyed.find(handle);
  const char* kind = it == driver().destroyed.end() ? "handle" : kNames[static_cast<int>(it->second)];
  report_violation(function, std::string("use of a destroyed ") + kind);
}

bool valid_device(CUdevice dev) { return dev >= 0 && dev < driver().device_count; }

int physical_device(CUdevice dev) { return valid_device(dev) ? driver().visible[dev] : -1; }

CUdevice ordinal_of(int physical) {
  const Driver& g = driver();
  for (int d = 0; d < g.device_count; ++d)
    if (g.visible[d] == physical) return d;
  return -1;
}

void run_host_function(const std::function<void()>& fn) {
  thread_calls().in_host_function = true;
  fn();
  thread_calls().in_host_function = false;
}

CUresult ensure_initialized(const char* function) {
  const ThreadCalls* calls = check_thread_keys(function);
  if (calls && calls->in_host_function) {
    report_violation(function, "made inside a host function, which the driver forbids");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  Driver& g = driver();
  if (g.initialized.load(std::memory_order_acquire)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lk(g.mu);
  if (g.initialized) return CUDA_SUCCESS;
  return g.init_error != CUDA_SUCCESS ? g.init_error : CUDA_ERROR_NOT_INITIALIZED;
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  if (g.initialized) return CUDA_SUCCESS;
  if (g.init_error != CUDA_SUCCESS) return g.init_error;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, [] { pthread_atfork(nullptr, nullptr, on_fork_child); });
  MachineConfig config;
  std::string error;
  Machine* m = nullptr;
  if (!read_machine_config(config, error) || !(m = Machine::attach(config, error)) || !m->claim_slot(error)) {
    std::fprintf(stderr, "simgpu[%d]: cuInit failed: %s\n", static_cast<int>(getpid()), error.c_str());
    g.init_error = CUDA_ERROR_NO_DEVICE;
    return g.init_error;
  }
  m->reap_dead_slots();
  g.machine = m;
  std::vector<PhysicalDevice> devices;
  for (int d = 0; d < m->device_count(); ++d)
    devices.push_back({device_uuid_string(d), device_pci_bus(d), m->header().sm_count[d]});
  const std::vector<int> seen =
      visible_devices(devices, std::getenv("CUDA_VISIBLE_DEVICES"), std::getenv("CUDA_DEVICE_ORDER"));
  if (seen.empty()) {  // "no CUDA-capable device is detected"
    g.init_error = CUDA_ERROR_NO_DEVICE;
    return g.init_error;
  }
  g.device_count = static_cast<int>(seen.size());
  std::copy(seen.begin(), seen.end(), g.visible);
  g.initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = ensure_initialized()) return r;
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = driver().device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = ensure_initialized()) return r;
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "%s", kDeviceName);
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = driver().machine->header().memory_bytes[physical_device(dev)];
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  device_uuid_bytes(physical_device(dev), reinterpret_cast<unsigned char*>(uuid->bytes));
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) { return SIM_EXPORT_CALL(cuDeviceGetUuid)(uuid, dev); }

CUresult cuDeviceGetPCIBusId(char* bus_id, int len, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!bus_id || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // The driver's form has a 4-digit domain, "0000:17:00.0": 12 characters, and cuda.h asks for a
  // buffer of 13. (device_pci_bus_id() is NVML's busId, with an 8-digit domain, which would not fit.)
  std::snprintf(bus_id, static_cast<std::size_t>(len), "%04X:%02X:00.0", 0u, device_pci_bus(physical_device(dev)));
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice* dev, const char* bus_id) {
  if (CUresult r = ensure_initialized()) return r;
  if (!dev || !bus_id) return CUDA_ERROR_INVALID_VALUE;
  // A bus ID names a physical device; the answer is its ordinal here, if this process sees it.
  const int found = device_by_pci_bus_id(bus_id, driver().machine->device_count());
  if (found < 0 || ordinal_of(found) < 0) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal_of(found);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  const int physical = physical_device(dev);
  *value = attrib == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
               ? static_cast<int>(driver().machine->header().sm_count[physical])
               : device_attribute(attrib, physical);
  return CUDA_SUCCESS;
}

CUresult cuDeviceComputeCapability(int* major, int* minor, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *major = kComputeMajor;
  *minor = kComputeMinor;
  return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  if (CUresult r = ensure_initialized()) return r;
  if (!can) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev) || !valid_device(peer)) return CUDA_ERROR_INVALID_DEVICE;
  *can = dev != peer ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst) {
  if (CUresult r = ensure_initialized()) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(src) || !valid_device(dst) || src == dst) return CUDA_ERROR_INVALID_DEVICE;
  *value = attrib == CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ? 0 : 1;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t* width, CUarray_format, unsigned, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!width) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *width = std::size_t{1} << 27;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetLuid(char*, unsigned int*, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_ERROR_NOT_SUPPORTED;  // Windows only
}

CUresult cuDeviceGetExecAffinitySupport(int* pi, CUexecAffinityType, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!pi) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *pi = 0;
  return CUDA_SUCCESS;
}

CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget, CUflushGPUDirectRDMAWritesScope) {
  return ensure_initialized();
}

CUresult cuGetErrorName(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const char* name = error_name(error);
  if (!name) {
    *str = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *str = name;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const char* text = error_string(error);
  if (!text) {
    *str = nullptr;
    return CUDA_ERROR_INVALID_VALUE;
  }
  *str = text;
  return CUDA_SUCCESS;
}

}  // extern "C"
