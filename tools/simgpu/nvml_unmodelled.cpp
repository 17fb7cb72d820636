// The NVML queries monitoring tools (nvitop, nvidia-ml-py clients) make that the simulator does not
// model: clocks, modes, thermals, power, ECC, PCIe, MIG, field values. Each is exported with its
// documented signature and checks its arguments as NVML does (UNINITIALIZED before nvmlInit,
// INVALID_ARGUMENT for a handle that is not a device or a NULL result pointer). Then it answers
// either what the simulated card is (values the simulated driver also reports, and the modes of a
// headless Linux GPU), or NVML_ERROR_NOT_SUPPORTED, as a real GPU without the feature does, which
// tools show as N/A. Devices and processes are in nvml.cpp; this file reaches them only through
// the exported API.
#include <cuda.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

#include "nvml_subset.h"
#include "nvml_thread.h"
#include "sim_identity.h"

// Defined in nvml.cpp (exported; -Bsymbolic-functions binds these calls to the simulator's own).
extern "C" {
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count);
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device);
}

// The layouts NVML's clients allocate (version words encode the size).
static_assert(sizeof(nvmlTemperature_v1_t) == 12);
static_assert(sizeof(nvmlFieldValue_t) == 40);
static_assert(sizeof(nvmlUUID_t) == 52 && nvmlUUID_v1 == 0x1000034u);
static_assert(sizeof(nvmlProcessDetail_v1_t) == 32 && sizeof(nvmlProcessDetailList_t) == 24);

#define SIM_NVML_EXPORT __attribute__((visibility("default")))

namespace {

// A device handle as the exported function passed it, with that function's name: the conversion
// from nvmlDevice_t happens in the exported function, so __builtin_FUNCTION() names it there.
struct Device {
  Device(nvmlDevice_t handle, const char* function = __builtin_FUNCTION()) : handle(handle), function(function) {}
  nvmlDevice_t handle;
  const char* function;
};

// NVML_SUCCESS with the device's index, or why the handle cannot be used. Every query about a device
// starts here, and counts as a call of the exported function (nvml_thread.h).
nvmlReturn_t check(Device d, int* dev = nullptr) {
  simgpu::nvml_thread_call(d.function);
  unsigned i = 0;
  const nvmlReturn_t r = nvmlDeviceGetIndex(d.handle, &i);
  if (dev) *dev = static_cast<int>(i);
  return r;
}

// A query of something the simulated card does not have: the documented argument checks, then
// NVML_ERROR_NOT_SUPPORTED.
template <class... Out>
nvmlReturn_t unsupported(Device d, Out*... out) {
  if (nvmlReturn_t r = check(d)) return r;
  if ((!out || ...)) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_SUPPORTED;
}

// A query with one fixed answer.
template <class T>
nvmlReturn_t answer(Device d, T* out, T value) {
  if (nvmlReturn_t r = check(d)) return r;
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  *out = value;
  return NVML_SUCCESS;
}

// A CUdevice_attribute of the simulated card, as the driver reports it.
nvmlReturn_t attribute(Device d, unsigned* out, CUdevice_attribute a, int divisor = 1) {
  int dev = 0;
  if (nvmlReturn_t r = check(d, &dev)) return r;
  if (!out) return NVML_ERROR_INVALID_ARGUMENT;
  *out = static_cast<unsigned>(simgpu::device_attribute(a, dev) / divisor);
  return NVML_SUCCESS;
}

// Clocks in MHz: the graphics and SM clocks are the driver's clock rate, the memory clock its memory
// clock rate (both kHz there). The card runs at them all the time (performance state P0), so the
// current clocks are the maximum ones. No video engine.
nvmlReturn_t clock(Device d, nvmlClockType_t type, unsigned* mhz) {
  if (type == NVML_CLOCK_GRAPHICS || type == NVML_CLOCK_SM)
    return attribute(d, mhz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1000);
  if (type == NVML_CLOCK_MEM) return attribute(d, mhz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 1000);
  if (nvmlReturn_t r = check(d)) return r;
  if (!mhz || type != NVML_CLOCK_VIDEO) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t unsupported_clock(Device d, nvmlClockType_t type, unsigned* mhz) {
  if (nvmlReturn_t r = check(d)) return r;
  if (!mhz || static_cast<unsigned>(type) >= NVML_CLOCK_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_SUPPORTED;
}

long long now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The name of a running process as NVML gives it: its command's first word, else its comm.
bool process_name(unsigned pid, std::string& name) {
  const std::string dir = "/proc/" + std::to_string(pid);
  std::ifstream cmdline(dir + "/cmdline");
  if (!cmdline) return false;
  std::getline(cmdline, name, '\0');
  if (name.empty()) {  // kernel threads and processes that cleared their command line
    std::ifstream comm(dir + "/comm");
    std::getline(comm, name);
  }
  return true;
}

}  // namespace

extern "C" {

// ---- Clocks ------------------------------------------------------------------------------------

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, nvmlClockType_t type, unsigned int* mhz) {
  return clock(d, type, mhz);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, nvmlClockType_t type, unsigned int* mhz) {
  return clock(d, type, mhz);
}
// Application clocks are a Tesla/Quadro feature.
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t d, nvmlClockType_t type, unsigned int* mhz) {
  return unsupported_clock(d, type, mhz);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t d, nvmlClockType_t type,
                                                                   unsigned int* mhz) {
  return unsupported_clock(d, type, mhz);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t d, unsigned long long* reasons) {
  return unsupported(d, reasons);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d, unsigned long long* reasons) {
  return unsupported(d, reasons);
}

// ---- Modes and states of a headless Linux GPU ----------------------------------------------------

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t d, nvmlComputeMode_t* mode) {
  int dev = 0;
  if (nvmlReturn_t r = check(d, &dev)) return r;
  if (!mode) return NVML_ERROR_INVALID_ARGUMENT;
  // The driver's CUcomputemode values are NVML's.
  *mode = static_cast<nvmlComputeMode_t>(simgpu::device_attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, dev));
  return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, nvmlEnableState_t* mode) {
  return answer(d, mode, NVML_FEATURE_DISABLED);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t d, nvmlEnableState_t* active) {
  return answer(d, active, NVML_FEATURE_DISABLED);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t d, nvmlEnableState_t* mode) {
  return answer(d, mode, NVML_FEATURE_DISABLED);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t d, nvmlPstates_t* state) {
  return answer(d, state, NVML_PSTATE_0);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t d, nvmlPstates_t* state) {  // the old name
  return answer(d, state, NVML_PSTATE_0);
}
// Driver models are a Windows notion.
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t d, nvmlDriverModel_t* current,
                                                         nvmlDriverModel_t* pending) {
  return unsupported(d, current, pending);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDriverModel(nvmlDevice_t d, nvmlDriverModel_t* current,
                                                      nvmlDriverModel_t* pending) {
  return unsupported(d, current, pending);
}

// ---- MIG: the card (Ada) has none ----------------------------------------------------------------

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned int* is_mig) {
  return answer(d, is_mig, 0u);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned int* current, unsigned int* pending) {
  return unsupported(d, current, pending);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned int* count) {
  return unsupported(d, count);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned int, nvmlDevice_t* mig) {
  return unsupported(d, mig);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t* d) {
  return unsupported(mig, d);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t d, unsigned int* id) { return unsupported(d, id); }
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t d, unsigned int* id) {
  return unsupported(d, id);
}

// ---- Thermals, fans and power: not modelled ------------------------------------------------------

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t sensor,
                                                      unsigned int* c) {
  if (nvmlReturn_t r = unsupported(d, c); r != NVML_ERROR_NOT_SUPPORTED) return r;
  if (sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_SUPPORTED;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t d, nvmlTemperature_v1_t* t) {
  if (nvmlReturn_t r = unsupported(d, t); r != NVML_ERROR_NOT_SUPPORTED) return r;
  if (t->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (t->sensorType != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_SUPPORTED;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d, nvmlTemperatureThresholds_t,
                                                               unsigned int* c) {
  return unsupported(d, c);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t d, unsigned int* percent) {
  return unsupported(d, percent);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t d, unsigned int, unsigned int* percent) {
  return unsupported(d, percent);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t d, unsigned int* fans) { return unsupported(d, fans); }
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int* mw) { return unsupported(d, mw); }
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t d, unsigned int* mw) {
  return unsupported(d, mw);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t d, unsigned int* mw) {
  return unsupported(d, mw);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t d, unsigned int* min_mw,
                                                                          unsigned int* max_mw) {
  return unsupported(d, min_mw, max_mw);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int* mw) {
  return unsupported(d, mw);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long* mj) {
  return unsupported(d, mj);
}

// ---- Memory: no ECC (the driver reports ECC disabled), BAR1 and confidential computing not modelled

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, nvmlMemoryErrorType_t type,
                                                         nvmlEccCounterType_t counter, unsigned long long* count) {
  if (nvmlReturn_t r = unsupported(d, count); r != NVML_ERROR_NOT_SUPPORTED) return r;
  if (static_cast<unsigned>(type) >= NVML_MEMORY_ERROR_TYPE_COUNT ||
      static_cast<unsigned>(counter) >= NVML_ECC_COUNTER_TYPE_COUNT)
    return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_SUPPORTED;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, nvmlEnableState_t* current,
                                                  nvmlEnableState_t* pending) {
  return unsupported(d, current, pending);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t d, nvmlBAR1Memory_t* bar1) {
  return unsupported(d, bar1);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t d, nvmlConfComputeMemSizeInfo_t* info) {
  return unsupported(d, info);
}

// ---- Video engines and PCIe: not modelled --------------------------------------------------------

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t d, unsigned int* percent,
                                                             unsigned int* period_us) {
  return unsupported(d, percent, period_us);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t d, unsigned int* percent,
                                                             unsigned int* period_us) {
  return unsupported(d, percent, period_us);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, nvmlPcieUtilCounter_t counter,
                                                         unsigned int* kib_per_s) {
  if (nvmlReturn_t r = unsupported(d, kib_per_s); r != NVML_ERROR_NOT_SUPPORTED) return r;
  if (static_cast<unsigned>(counter) >= NVML_PCIE_UTIL_COUNT) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_SUPPORTED;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t d, unsigned int* gen) {
  return unsupported(d, gen);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t d, unsigned int* width) {
  return unsupported(d, width);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t d, unsigned int* gen) {
  return unsupported(d, gen);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t d, unsigned int* width) {
  return unsupported(d, width);
}

// ---- What the card is: as the driver's attributes describe it -----------------------------------

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, nvmlDeviceArchitecture_t* arch) {
  return answer(d, arch, static_cast<nvmlDeviceArchitecture_t>(NVML_DEVICE_ARCH_ADA));  // compute capability 8.9
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, nvmlBrandType_t* brand) {
  return answer(d, brand, NVML_BRAND_GEFORCE);  // a GeForce-like card (sim_identity.h)
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t d, unsigned int* cores) {
  if (nvmlReturn_t r = attribute(d, cores, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)) return r;
  *cores *= 128;  // FP32 cores per Ada SM
  return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t d, unsigned int* bits) {
  return attribute(d, bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t d, unsigned int* multi) {
  return attribute(d, multi, CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD);
}
// Board serial numbers and VBIOS versions are not simulated (GeForce boards report no serial).
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t d, char* serial, unsigned int) {
  return unsupported(d, serial);
}
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t d, char* version, unsigned int) {
  return unsupported(d, version);
}

// ---- Field values: every field answers NVML_ERROR_NOT_SUPPORTED in its own entry -----------------

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t* values) {
  if (nvmlReturn_t r = check(d)) return r;
  if (!values || count < 0) return NVML_ERROR_INVALID_ARGUMENT;
  const long long now = now_us();
  for (int i = 0; i < count; ++i) {
    values[i].timestamp = now;
    values[i].latencyUsec = 0;
    values[i].valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    values[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    values[i].value.ullVal = 0;
  }
  return NVML_SUCCESS;
}

// ---- More ways to find a device ------------------------------------------------------------------

SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t* uuid, nvmlDevice_t* d) {
  simgpu::nvml_thread_call(__func__);
  unsigned n = 0;
  if (nvmlReturn_t r = nvmlDeviceGetCount_v2(&n)) return r;
  if (!uuid || !d) return NVML_ERROR_INVALID_ARGUMENT;
  if (uuid->version != nvmlUUID_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
  if (uuid->type == NVML_UUID_TYPE_ASCII) {
    const std::string text(uuid->value.str, strnlen(uuid->value.str, sizeof uuid->value.str));
    return nvmlDeviceGetHandleByUUID(text.c_str(), d);
  }
  if (uuid->type != NVML_UUID_TYPE_BINARY) return NVML_ERROR_INVALID_ARGUMENT;
  for (unsigned i = 0; i < n; ++i) {
    std::array<unsigned char, NVML_DEVICE_UUID_BINARY_LEN> bytes{};
    simgpu::device_uuid_bytes(static_cast<int>(i), bytes.data());
    if (std::memcmp(bytes.data(), uuid->value.bytes, bytes.size()) == 0) return nvmlDeviceGetHandleByIndex_v2(i, d);
  }
  return NVML_ERROR_NOT_FOUND;
}
// Simulated boards have no serial number, so none matches.
SIM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char* serial, nvmlDevice_t* d) {
  simgpu::nvml_thread_call(__func__);
  unsigned n = 0;
  if (nvmlReturn_t r = nvmlDeviceGetCount_v2(&n)) return r;
  if (!serial || !d) return NVML_ERROR_INVALID_ARGUMENT;
  return NVML_ERROR_NOT_FOUND;
}

// ---- System --------------------------------------------------------------------------------------

SIM_NVML_EXPORT nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char* name, unsigned int length) {
  simgpu::nvml_thread_call(__func__);
  unsigned n = 0;
  if (nvmlReturn_t r = nvmlDeviceGetCount_v2(&n)) return r;
  if (!name || length == 0) return NVML_ERROR_INVALID_ARGUMENT;
  std::string s;
  if (!process_name(pid, s)) return NVML_ERROR_NOT_FOUND;
  const std::size_t len = std::min<std::size_t>(s.size(), length - 1);  // cut to fit
  std::memcpy(name, s.data(), len);
  name[len] = '\0';
  return NVML_SUCCESS;
}
// No GPUs are excluded, and no S-class units exist.
SIM_NVML_EXPORT nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int* count) {
  simgpu::nvml_thread_call(__func__);
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;
  return NVML_SUCCESS;
}
SIM_NVML_EXPORT nvmlReturn_t nvmlUnitGetCount(unsigned int* count) {
  simgpu::nvml_thread_call(__func__);
  unsigned n = 0;
  if (nvmlReturn_t r = nvmlDeviceGetCount_v2(&n)) return r;
  if (!count) return NVML_ERROR_INVALID_ARGUMENT;
  *count = 0;
  return NVML_SUCCESS;
}

}  // extern "C"
