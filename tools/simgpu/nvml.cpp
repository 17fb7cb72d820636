// libnvidia-ml.so.1 of the simulated machine: devices, memory, running processes and utilization,
// all read from the same shared state the simulated driver writes. The queries it does not model
// (clocks, thermals, power, ECC, MIG...) are in nvml_unmodelled.cpp.
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "machine_state.h"
#include "nvml_start.h"
#include "nvml_subset.h"
#include "nvml_thread.h"
#include "sim_identity.h"

struct nvmlDevice_st {
  int index;
};

namespace {

using simgpu::Machine;

// Recursive: NVML's own thread calls its entry points, through the linker, while it holds it.
std::recursive_mutex g_mu;
int g_init_count = 0;
Machine* g_machine = nullptr;  // attached once, kept across shutdown/init cycles
nvmlDevice_st g_devices[simgpu::kMaxDevices];
std::string g_lost_marker_prefix;  // "<SIMGPU_STATE>.lost-": a file <prefix><index> marks a lost GPU

nvmlReturn_t attach_locked() {
  if (g_machine) return NVML_SUCCESS;
  simgpu::MachineConfig config;
  std::string error;
  if (!simgpu::read_machine_config(config, error) || !(g_machine = Machine::attach(config, error))) {
    std::fprintf(stderr, "simgpu-nvml[%d]: %s\n", static_cast<int>(getpid()), error.c_str());
    return NVML_ERROR_DRIVER_NOT_LOADED;
  }
  for (int i = 0; i < simgpu::kMaxDevices; ++i) g_devices[i].index = i;
  g_lost_marker_prefix = config.state_path + ".lost-";
  return NVML_SUCCESS;
}

// A GPU that fell off the bus: NVML still lists it, and answers NVML_ERROR_GPU_IS_LOST to every
// query about it. Tests make one lost by creating the marker file (and bring it back by removing it).
bool lost(int index) { return ::access((g_lost_marker_prefix + std::to_string(index)).c_str(), F_OK) == 0; }

// Every query starts here or in device_index: `function` is the exported function (nvml_thread.h).
nvmlReturn_t ready(const char* function = __builtin_FUNCTION()) {
  simgpu::nvml_thread_call(function);
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  return g_init_count > 0 ? NVML_SUCCESS : NVML_ERROR_UNINITIALIZED;
}

nvmlReturn_t device_index(nvmlDevice_t d, int* index, const char* function = __builtin_FUNCTION()) {
  if (nvmlReturn_t r = ready(function)) return r;
  if (!d || d < g_devices || d >= g_devices + g_machine->device_count()) return NVML_ERROR_INVALID_ARGUMENT;
  simgpu::nvml_thread_device(function, d->index);
  if (lost(d->index)) return NVML_ERROR_GPU_IS_LOST;
  *index = d->index;
  return NVML_SUCCESS;
}

nvmlReturn_t copy_string(const std::string& s, char* out, unsigned int length) {
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  if (s.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, s.c_str(), s.size() + 1);
  return NVML_SUCCESS;
}

void memory_of(int dev, unsigned long long& total, unsigned long long& free_bytes, unsigned long long& used) {
  g_machine->reap_dead_slots();
  std::uint64_t f = 0, t = 0;
  g_machine->memory_info(dev, f, t);
  total = t;
  free_bytes = f;
  used = t - f;
}

// Processes with memory or work on the device, as nvidia-smi lists compute processes.
// Info: nvmlProcessInfo_v1_t, nvmlProcessInfo_t (v2 and v3) or nvmlProcessDetail_v1_t.
template <class Info>
nvmlReturn_t running_processes(nvmlDevice_t d, unsigned int* count, Info* infos,
                               const char* function = __builtin_FUNCTION()) {
  int dev = 0;
  if (nvmlReturn_t r = device_index(d, &dev, function)) return r;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  g_machine->reap_dead_slots();
  unsigned n = 0;
  const unsigned capacity = infos ? *count : 0;
  for (auto& slot : g_machine->state().slots) {
    const int pid = slot.pid.load();
    if (pid == 0) continue;
    const auto& s = slot.dev[dev];
    const std::uint64_t mem = s.memory_bytes.load();
    if (mem == 0 && s.kernels.load() == 0) continue;
    if (n < capacity) {
      Info info{};
      const int host_pid = slot.host_pid.load();  // NVML lists PIDs as the host sees them
      info.pid = static_cast<unsigned>(host_pid != 0 ? host_pid : pid);
      info.usedGpuMemory = mem;
      if constexpr (requires { info.gpuInstanceId; }) {  // no MIG
        info.gpuInstanceId = 0xFFFFFFFFu;
        info.computeInstanceId = 0xFFFFFFFFu;
      }
      infos[n] = info;
    }
    ++n;
  }
  const bool fits = n <= capacity || (n == 0);
  *count = n;
  return fits ? NVML_SUCCESS : NVML_ERROR_INSUFFICIENT_SIZE;
}

unsigned percent(std::uint64_t busy_ns, std::uint64_t window_ns) {
  return static_cast<unsigned>(std::min<std::uint64_t>(100, (busy_ns * 100 + window_ns / 2) / window_ns));
}

nvmlReturn_t init(const char* function = __builtin_FUNCTION()) {
  simgpu::nvml_thread_call(function);
  std::lock_guard<std::recursive_mutex> lk(g_mu);
  if (nvmlReturn_t r = attach_locked()) return r;
  // Starting NVML (the count leaving zero) takes milliseconds on a real GPU (11 ms the first time on
  // an H200, about 2 ms later); SIMGPU_NVML_START_US makes the simulated start as slow.
  if (g_init_count == 0) {
    static const long start_us = [] {
      const char* v = std::getenv("SIMGPU_NVML_START_US");
      return v != nullptr ? std::strtol(v, nullptr, 10) : 0L;
    }();
    if (start_us > 0) usleep(static_cast<useconds_t>(start_us));
    simgpu::nvml_started_locked(g_mu);
  }
  ++g_init_count;
  return NVML_SUCCESS;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) nvmlReturn_t nvmlInitWithFlags(unsigned int) { return init(); }

// The older inits are nvmlInitWithFlags(0), called through the dynamic linker, so that a library
// preloaded in front of NVML (libslice) sees that inner call too, from inside its own call of the
// outer one: its hooks must let such a call through without waiting on anything the outer call
// holds (a lock held across nvmlInit hung libslice at every first context on a real GPU,
// 2026-12-04).
static nvmlReturn_t init_through_the_linker() {
  using Init = nvmlReturn_t (*)(unsigned int);
  const auto inner = reinterpret_cast<Init>(dlsym(RTLD_DEFAULT, "nvmlInitWithFlags"));
  return inner != nullptr ? inner(0) : init();
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlInit_v2() { return init_through_the_linker(); }
__attribute__((visibility("default"))) nvmlReturn_t nvmlInit() { return init_through_the_linker(); }

__attribute__((visibility("default"))) nvmlReturn_t nvmlShutdown() {
  simgpu::nvml_thread_call(__func__);
  void* stopped = nullptr;
  {
    std::lock_guard<std::recursive_mutex> lk(g_mu);
    if (g_init_count == 0) return NVML_ERROR_UNINITIALIZED;
    if (--g_init_count == 0) stopped = simgpu::nvml_stopping_locked();
  }
  simgpu::nvml_join_stopped(stopped);  // its thread takes the lock: joined after it is let go
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) const char* nvmlErrorString(nvmlReturn_t r) {
  simgpu::nvml_thread_call(__func__);
  switch (r) {
    case NVML_SUCCESS:
      return "Success";
    case NVML_ERROR_UNINITIALIZED:
      return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT:
      return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED:
      return "Not Supported";
    case NVML_ERROR_NO_PERMISSION:
      return "Insufficient Permissions";
    case NVML_ERROR_NOT_FOUND:
      return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE:
      return "Insufficient Size";
    case NVML_ERROR_DRIVER_NOT_LOADED:
      return "Driver Not Loaded";
    case NVML_ERROR_FUNCTION_NOT_FOUND:
      return "Function Not Found";
    case NVML_ERROR_NO_DATA:
      return "No data";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
      return "Argument version mismatch";
    default:
      return "Unknown Error";
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetDriverVersion(char* v, unsigned int n) {
  if (nvmlReturn_t r = ready()) return r;
  return copy_string("580.65.06", v, n);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetNVMLVersion(char* v, unsigned int n) {
  simgpu::nvml_thread_call(__func__);
  return copy_string("13.580.65.06", v, n);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetCudaDriverVersion(int* v) {
  simgpu::nvml_thread_call(__func__);
  if (!v) return NVML_ERROR_INVALID_ARGUMENT;
  *v = 13000;
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int* v) {
  return nvmlSystemGetCudaDriverVersion(v);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  if (nvmlReturn_t r = ready()) return r;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = static_cast<unsigned>(g_machine->device_count());
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCount(unsigned int* c) {
  return nvmlDeviceGetCount_v2(c);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t* d) {
  if (nvmlReturn_t r = ready()) return r;
  if (!d || i >= static_cast<unsigned>(g_machine->device_count())) return NVML_ERROR_INVALID_ARGUMENT;
  *d = &g_devices[i];
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int i, nvmlDevice_t* d) {
  return nvmlDeviceGetHandleByIndex_v2(i, d);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* d) {
  if (nvmlReturn_t r = ready()) return r;
  if (!uuid || !d) return NVML_ERROR_INVALID_ARGUMENT;
  int i = simgpu::device_by_uuid_string(uuid, g_machine->device_count());
  if (i < 0) return NVML_ERROR_NOT_FOUND;
  *d = &g_devices[i];
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus, nvmlDevice_t* d) {
  if (nvmlReturn_t r = ready()) return r;
  if (!bus || !d) return NVML_ERROR_INVALID_ARGUMENT;
  int i = simgpu::device_by_pci_bus_id(bus, g_machine->device_count());
  if (i < 0) return NVML_ERROR_NOT_FOUND;
  *d = &g_devices[i];
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char* b, nvmlDevice_t* d) {
  return nvmlDeviceGetHandleByPciBusId_v2(b, d);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned int* index) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  if (!index) return NVML_ERROR_INVALID_ARGUMENT;
  *index = static_cast<unsigned>(i);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned int* minor) {
  return nvmlDeviceGetIndex(d, minor);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char* name, unsigned int n) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  return copy_string(simgpu::kDeviceName, name, n);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char* uuid, unsigned int n) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  return copy_string(simgpu::device_uuid_string(i), uuid, n);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t* pci) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  if (!pci) return NVML_ERROR_INVALID_ARGUMENT;
  *pci = nvmlPciInfo_t{};
  std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "0000:%02X:00.0", simgpu::device_pci_bus(i));
  std::snprintf(pci->busId, sizeof pci->busId, "%s", simgpu::device_pci_bus_id(i).c_str());
  pci->bus = simgpu::device_pci_bus(i);
  pci->pciDeviceId = 0x268410DEu;
  pci->pciSubSystemId = 0x16F310DEu;
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t* p) {
  return nvmlDeviceGetPciInfo_v3(d, p);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t* p) {
  return nvmlDeviceGetPciInfo_v3(d, p);
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int* major,
                                                                                       int* minor) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  if (!major || !minor) return NVML_ERROR_INVALID_ARGUMENT;
  *major = 8;
  *minor = 9;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t* m) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  memory_of(i, m->total, m->free, m->used);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t* m) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  if (!m) return NVML_ERROR_INVALID_ARGUMENT;
  if (m->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  m->reserved = 0;
  memory_of(i, m->total, m->free, m->used);
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d,
                                                                                            unsigned int* c,
                                                                                            nvmlProcessInfo_t* p) {
  return running_processes(d, c, p);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t d,
                                                                                            unsigned int* c,
                                                                                            nvmlProcessInfo_t* p) {
  return running_processes(d, c, p);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t d,
                                                                                         unsigned int* c,
                                                                                         nvmlProcessInfo_v1_t* p) {
  return running_processes(d, c, p);
}

// The simulated device runs no graphics or MPS clients (every version of both lists).
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d,
                                                                                             unsigned int* c,
                                                                                             nvmlProcessInfo_t*) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  if (!c) return NVML_ERROR_INVALID_ARGUMENT;
  *c = 0;
  return NVML_SUCCESS;
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t d,
                                                                                             unsigned int* c,
                                                                                             nvmlProcessInfo_t* p) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(d, c, p);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t d,
                                                                                          unsigned int* c,
                                                                                          nvmlProcessInfo_v1_t*) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(d, c, nullptr);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t d,
                                                                                               unsigned int* c,
                                                                                               nvmlProcessInfo_t* p) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(d, c, p);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t d,
                                                                                               unsigned int* c,
                                                                                               nvmlProcessInfo_t* p) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(d, c, p);
}
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t d,
                                                                                            unsigned int* c,
                                                                                            nvmlProcessInfo_v1_t*) {
  return nvmlDeviceGetGraphicsRunningProcesses_v3(d, c, nullptr);
}

// The same lists as detail records: compute processes as above, no graphics or MPS ones.
__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(
    nvmlDevice_t d, nvmlProcessDetailList_t* list) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  if (!list) return NVML_ERROR_INVALID_ARGUMENT;
  if (list->version != nvmlProcessDetailList_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  switch (list->mode) {
    case NVML_PROCESS_MODE_COMPUTE:
      return running_processes(d, &list->numProcArrayEntries, list->procArray);
    case NVML_PROCESS_MODE_GRAPHICS:
    case NVML_PROCESS_MODE_MPS:
      list->numProcArrayEntries = 0;
      return NVML_SUCCESS;
    default:
      return NVML_ERROR_INVALID_ARGUMENT;
  }
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d,
                                                                                  nvmlUtilization_t* u) {
  int i = 0;
  if (nvmlReturn_t r = device_index(d, &i)) return r;
  if (!u) return NVML_ERROR_INVALID_ARGUMENT;
  const std::uint64_t window = 1'000'000'000ull;
  u->gpu = percent(g_machine->recent_busy(g_machine->state().devices[i].util, window, simgpu::monotonic_ns()), window);
  u->memory = 0;
  return NVML_SUCCESS;
}

__attribute__((visibility("default"))) nvmlReturn_t nvmlDeviceGetProcessUtilization(
    nvmlDevice_t d, nvmlProcessUtilizationSample_t* samples, unsigned int* count, unsigned long long) {
  int dev = 0;
  if (nvmlReturn_t r = device_index(d, &dev)) return r;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  g_machine->reap_dead_slots();
  const std::uint64_t now = simgpu::monotonic_ns();
  const std::uint64_t window = 1'000'000'000ull;
  unsigned n = 0;
  for (auto& slot : g_machine->state().slots) {
    const int pid = slot.pid.load();
    if (pid == 0 || slot.dev[dev].kernels.load() == 0) continue;
    if (samples && n < *count) {
      nvmlProcessUtilizationSample_t& s = samples[n];
      s = nvmlProcessUtilizationSample_t{};
      s.pid = static_cast<unsigned>(pid);
      s.timeStamp = now / 1000;  // microseconds, as NVML reports
      s.smUtil = percent(g_machine->recent_busy(slot.dev[dev].util, window, now), window);
    }
    ++n;
  }
  if (!samples || n > *count) {
    *count = n;
    return n == 0 ? NVML_ERROR_NOT_FOUND : NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *count = n;
  return n == 0 ? NVML_ERROR_NOT_FOUND : NVML_SUCCESS;
}

}  // extern "C"
