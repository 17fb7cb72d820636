// Conformance of the simulated driver (tools/simgpu) with the real CUDA driver and NVML, wherever a
// CUDA-interposing library depends on the answer: signatures, error codes, rounding and accounting.
//
// Linked directly against the simulated libcuda.so.1 and libnvidia-ml.so.1. tests/run_isolated.sh
// gives this process its own SIMGPU_STATE, so nothing else uses the simulated device and every
// memory figure is exact. The machine is the default one (1 device, 24 GiB). A test that needs a
// process before cuInit, or another machine (more devices, other sizes), runs its body in a forked
// child with its own SIMGPU_STATE (see InChild).
//
// Every test starts with the device's primary context retained and current (fixture Sim) and ends
// by releasing it, which frees whatever the test left allocated in it.
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nvml_subset.h"  // NVML's types as the simulator declares them (the toolkit ships no nvml.h)

// Driver exports cuda.h declares only inside the driver's own build or in per-thread-stream mode.
extern "C" {
CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* params, int n, unsigned int flags, CUdevice dev);
CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                     unsigned bz, unsigned shmem, CUstream s, void** params, void** extra);
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params, void** extra);
CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                                unsigned by, unsigned bz, unsigned shmem, CUstream s, void** params);
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream s);
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s);
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec exec, CUstream s);

// The NVML functions this test calls (declared by us, as nothing else declares them).
nvmlReturn_t nvmlInit_v2();
nvmlReturn_t nvmlShutdown();
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count);
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByUUID(const char* uuid, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length);
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length);
nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_t* infos);
nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization);
// Queries the simulator answers without modelling them (tools/simgpu/nvml_unmodelled.cpp).
nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock);
nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int* clock);
nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode);
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode);
nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t* active);
nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t* display);
nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t* state);
nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, nvmlDriverModel_t* current, nvmlDriverModel_t* pending);
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int* is_mig);
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current, unsigned int* pending);
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned int* temp);
nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t* temperature);
nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int* speed);
nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power);
nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int* limit);
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t type, nvmlEccCounterType_t counter,
                                         unsigned long long* count);
nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t* bar1);
nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int* value);
nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int* utilization, unsigned int* period_us);
nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int* utilization, unsigned int* period_us);
nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int count, nvmlFieldValue_t* values);
nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t* uuid, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t* list);
}

// GoogleTest prints a CUresult by its name (found by argument-dependent lookup: CUresult is global).
void PrintTo(CUresult r, std::ostream* os) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  *os << (name ? name : "unknown CUresult") << " (" << static_cast<int>(r) << ")";
}

#define EXPECT_CU(expected, call) EXPECT_EQ(expected, (call)) << #call << " "
#define ASSERT_CU(expected, call) ASSERT_EQ(expected, (call)) << #call << " "
#define CU(call) ASSERT_CU(CUDA_SUCCESS, call)
#define EXPECT_NVML(expected, call) EXPECT_EQ(expected, (call)) << #call
#define NVML(call) ASSERT_EQ(NVML_SUCCESS, (call)) << #call

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t GiB = 1024 * MiB;
constexpr std::size_t kDeviceBytes = 24 * GiB;  // SIMGPU_MEMORY's default
constexpr std::size_t kGranularity = 2 * MiB;   // VMM and pool granularity
constexpr std::uint64_t kMs = 1'000'000;        // nanoseconds

#ifdef SIMGPU_TEST_KERNEL_DIR
const char* const kKernelDir = SIMGPU_TEST_KERNEL_DIR;
#else
const char* const kKernelDir = nullptr;
#endif
constexpr const char* kScaleKernel = "_Z5scaleIfEvPT_i6Triple";  // template<float> scale(float*, int, Triple)

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double ms_since(Clock::time_point t0) { return ms_between(t0, Clock::now()); }

std::string kernel_file(const std::string& name) { return std::string(kKernelDir ? kKernelDir : ".") + "/" + name; }

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string uuid_text(const CUuuid& u) {
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  char s[64];
  std::snprintf(s, sizeof s, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return s;
}

std::size_t free_bytes() {
  std::size_t f = 0, t = 0;
  EXPECT_CU(CUDA_SUCCESS, cuMemGetInfo(&f, &t));
  return f;
}

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

CUresult launch_spin(CUfunction f, std::uint64_t ns, CUstream s) {
  unsigned long long v = ns;
  void* args[] = {&v};
  return cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr);
}

float elapsed_ms(CUevent a, CUevent b) {
  float ms = -1;
  EXPECT_CU(CUDA_SUCCESS, cuEventElapsedTime(&ms, a, b));
  return ms;
}

cuuint64_t pool_attr(CUmemoryPool pool, CUmemPool_attribute attr) {
  cuuint64_t v = ~0ull;
  EXPECT_CU(CUDA_SUCCESS, cuMemPoolGetAttribute(pool, attr, &v));
  return v;
}

// Runs `body` in a forked child that has its own simulated machine (SIMGPU_STATE) and the given
// SIMGPU_* settings, and expects it to pass. The child reports failures through GoogleTest as usual
// (they print into this test's output) and exits 1 if there were any. The child starts without a
// driver: cuInit there reads the settings, as in a new process.
void InChild(const std::vector<std::pair<std::string, std::string>>& env, const std::function<void()>& body) {
  const char* tmp = std::getenv("SLICE_TEST_TMPDIR");
  const std::string state = std::string(tmp && *tmp ? tmp : "/tmp") + "/conformance-child-" + std::to_string(getpid()) +
                            "-" + std::to_string(Clock::now().time_since_epoch().count());
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << "fork";
  if (pid == 0) {
    alarm(60);  // a child that hangs dies, and the test fails, instead of waiting forever
    setenv("SIMGPU_STATE", state.c_str(), 1);
    for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
    body();
    const bool failed = ::testing::Test::HasFailure();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(failed ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(pid, waitpid(pid, &status, 0));
  unlink(state.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child failed (wait status " << status << ")";
}

// ---------------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------------

class Sim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(CUDA_SUCCESS, cuInit(0));
    ASSERT_CU(CUDA_SUCCESS, cuDeviceGet(&dev_, 0));
    ASSERT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRetain(&ctx_, dev_));
    retained_ = true;
    ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(ctx_));
  }
  void TearDown() override {
    CUcontext c = nullptr;
    while (cuCtxPopCurrent(&c) == CUDA_SUCCESS) {
    }
    if (retained_) {
      EXPECT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRelease(dev_));
    }
  }
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  bool retained_ = false;
};

// Sim with the sm_89 cubin of tests/kernels loaded: spin(unsigned long long ns) and noop().
class SimKernels : public Sim {
 protected:
  void SetUp() override {
    if (!kKernelDir) GTEST_SKIP() << "nvcc was not found at configure time: no sample kernels";
    Sim::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_CU(CUDA_SUCCESS, cuModuleLoad(&module_, kernel_file("sample_kernels_sm89.cubin").c_str()));
    ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&spin_, module_, "spin"));
    ASSERT_CU(CUDA_SUCCESS, cuModuleGetFunction(&noop_, module_, "noop"));
  }
  void TearDown() override {
    if (module_) {
      EXPECT_CU(CUDA_SUCCESS, cuCtxSynchronize());
      EXPECT_CU(CUDA_SUCCESS, cuModuleUnload(module_));
    }
    Sim::TearDown();
  }
  CUmodule module_ = nullptr;
  CUfunction spin_ = nullptr;
  CUfunction noop_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Initialisation and devices
// ---------------------------------------------------------------------------------------------

TEST(Init, CallsBeforeCuInitFailWithNotInitialized) {
  InChild({}, [] {
    int n = -1;
    CUdevice d = -1;
    CUcontext c = nullptr;
    CUdeviceptr p = 0;
    std::size_t f = 0, t = 0;
    char name[64];
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&n));
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGet(&d, 0));
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetName(name, sizeof name, 0));
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuDevicePrimaryCtxRetain(&c, 0));
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuCtxGetCurrent(&c));
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuCtxCreate(&c, nullptr, 0, 0));
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuMemAlloc(&p, 4096));
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuMemGetInfo(&f, &t));
    // What works without cuInit: the version, error names, and cuGetProcAddress (the runtime looks up
    // cuInit itself through it).
    int version = 0;
    EXPECT_CU(CUDA_SUCCESS, cuDriverGetVersion(&version));
    EXPECT_EQ(13000, version);
    const char* text = nullptr;
    EXPECT_CU(CUDA_SUCCESS, cuGetErrorName(CUDA_ERROR_NOT_INITIALIZED, &text));
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuInit", &pfn, 2000, 0, &status));
    EXPECT_EQ(CU_GET_PROC_ADDRESS_SUCCESS, status);
    EXPECT_EQ(reinterpret_cast<void*>(&cuInit), pfn);

    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuInit(1));
    EXPECT_CU(CUDA_ERROR_NOT_INITIALIZED, cuDeviceGetCount(&n)) << "a refused cuInit initialises nothing";
    EXPECT_CU(CUDA_SUCCESS, cuInit(0));
    EXPECT_CU(CUDA_SUCCESS, cuInit(0)) << "cuInit again is harmless";
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuInit(1));
    EXPECT_CU(CUDA_SUCCESS, cuDeviceGetCount(&n));
    EXPECT_EQ(1, n);
  });
}

TEST_F(Sim, DeviceIdentityAndAttributes) {
  int n = 0;
  CU(cuDeviceGetCount(&n));
  EXPECT_EQ(1, n);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDriverGetVersion(nullptr));

  char name[256] = {};
  CU(cuDeviceGetName(name, sizeof name, dev_));
  EXPECT_GT(std::strlen(name), 0u);
  EXPECT_EQ(0, std::strncmp(name, "NVIDIA", 6)) << name;

  CUuuid a{}, b{};
  CU(cuDeviceGetUuid(&a, dev_));
  CU(cuDeviceGetUuid(&b, dev_));
  EXPECT_EQ(0, std::memcmp(a.bytes, b.bytes, sizeof a.bytes)) << "the UUID is stable";
  EXPECT_NE(std::string(16, '\0'), std::string(a.bytes, 16)) << "the UUID is not all zero";

  // "[domain]:[bus]:[device].[function]" in hexadecimal, in a buffer of 13 characters.
  char bus[13] = {};
  CU(cuDeviceGetPCIBusId(bus, sizeof bus, dev_));
  EXPECT_EQ(12u, std::strlen(bus)) << bus;
  unsigned domain = 99, busno = 999, device = 99, function = 99;
  ASSERT_EQ(4, std::sscanf(bus, "%4x:%2x:%2x.%1x", &domain, &busno, &device, &function)) << bus;
  int attr = -1;
  CU(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev_));
  EXPECT_EQ(domain, static_cast<unsigned>(attr));
  CU(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev_));
  EXPECT_EQ(busno, static_cast<unsigned>(attr));
  CU(cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev_));
  EXPECT_EQ(device, static_cast<unsigned>(attr));

  // Back again, in every form cuDeviceGetByPCIBusId documents and in either letter case.
  char forms[4][32];
  std::snprintf(forms[0], sizeof forms[0], "%s", bus);
  std::snprintf(forms[1], sizeof forms[1], "%04x:%02x:%02x", domain, busno, device);
  std::snprintf(forms[2], sizeof forms[2], "%02x:%02x.%x", busno, device, function);
  std::snprintf(forms[3], sizeof forms[3], "%08X:%02X:%02X.%X", domain, busno, device, function);
  for (const char* form : forms) {
    CUdevice found = -1;
    EXPECT_CU(CUDA_SUCCESS, cuDeviceGetByPCIBusId(&found, form)) << form;
    EXPECT_EQ(dev_, found) << form;
  }
  CUdevice none = -1;
  EXPECT_NE(CUDA_SUCCESS, cuDeviceGetByPCIBusId(&none, "0000:fe:1f.7"));

  int major = 0, minor = 0, sms = 0, warp = 0;
  CU(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_));
  CU(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_));
  CU(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev_));
  CU(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev_));
  EXPECT_EQ(8, major);
  EXPECT_EQ(9, minor);
  EXPECT_GT(sms, 0);
  EXPECT_EQ(32, warp);
  for (CUdevice_attribute one :
       {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY,
        CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED}) {
    CU(cuDeviceGetAttribute(&attr, one, dev_));
    EXPECT_EQ(1, attr) << "attribute " << one;
  }
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetAttribute(&attr, CU_DEVICE_ATTRIBUTE_MAX, dev_));

  std::size_t total = 0;
  CU(cuDeviceTotalMem(&total, dev_));
  EXPECT_EQ(kDeviceBytes, total);
}

TEST_F(Sim, InvalidDeviceOrdinal) {
  CUdevice d = -1;
  char name[64];
  int v = 0;
  std::size_t bytes = 0;
  CUuuid u{};
  char bus[16];
  CUcontext c = nullptr;
  for (int bad : {1, -1, 8}) {
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGet(&d, bad));
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetName(name, sizeof name, bad));
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, bad));
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceTotalMem(&bytes, bad));
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetUuid(&u, bad));
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetPCIBusId(bus, sizeof bus, bad));
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDevicePrimaryCtxRetain(&c, bad));
    EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuCtxCreate(&c, nullptr, 0, bad));
  }
}

TEST(Init, TwoDevicesHaveDistinctStableIdentitiesAndTheirOwnMemory) {
  InChild({{"SIMGPU_DEVICES", "2"}, {"SIMGPU_MEMORY", "8Gi,16Gi"}}, [] {
    ASSERT_CU(CUDA_SUCCESS, cuInit(0));
    int n = 0;
    ASSERT_CU(CUDA_SUCCESS, cuDeviceGetCount(&n));
    ASSERT_EQ(2, n);
    CUuuid u[2] = {};
    char bus[2][13] = {};
    for (int d = 0; d < 2; ++d) {
      ASSERT_CU(CUDA_SUCCESS, cuDeviceGetUuid(&u[d], d));
      CUuuid again{};
      ASSERT_CU(CUDA_SUCCESS, cuDeviceGetUuid(&again, d));
      EXPECT_EQ(0, std::memcmp(u[d].bytes, again.bytes, 16));
      ASSERT_CU(CUDA_SUCCESS, cuDeviceGetPCIBusId(bus[d], sizeof bus[d], d));
      CUdevice back = -1;
      EXPECT_CU(CUDA_SUCCESS, cuDeviceGetByPCIBusId(&back, bus[d])) << bus[d];
      EXPECT_EQ(d, back);
    }
    EXPECT_NE(0, std::memcmp(u[0].bytes, u[1].bytes, 16)) << "each device has its own UUID";
    EXPECT_STRNE(bus[0], bus[1]);

    const std::size_t expected[2] = {8 * GiB, 16 * GiB};
    for (int d = 0; d < 2; ++d) {
      std::size_t total = 0, f = 0, t = 0;
      EXPECT_CU(CUDA_SUCCESS, cuDeviceTotalMem(&total, d));
      EXPECT_EQ(expected[d], total);
      CUcontext c = nullptr;
      ASSERT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRetain(&c, d));
      ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(c));
      CUdevice current = -1;
      EXPECT_CU(CUDA_SUCCESS, cuCtxGetDevice(&current));
      EXPECT_EQ(d, current);
      EXPECT_CU(CUDA_SUCCESS, cuMemGetInfo(&f, &t));
      EXPECT_EQ(expected[d], t);
      EXPECT_EQ(expected[d], f);
      CUdeviceptr p = 0;
      EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, expected[d] + 1));
      ASSERT_CU(CUDA_SUCCESS, cuMemAlloc(&p, expected[d]));
      int ordinal = -1;
      EXPECT_CU(CUDA_SUCCESS, cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p));
      EXPECT_EQ(d, ordinal);
      EXPECT_CU(CUDA_SUCCESS, cuMemGetInfo(&f, &t));
      EXPECT_EQ(0u, f);
      EXPECT_CU(CUDA_SUCCESS, cuMemFree(p));
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Contexts
// ---------------------------------------------------------------------------------------------

TEST_F(Sim, PrimaryContextRefcountAndState) {
  unsigned flags = 99;
  int active = -1;
  CU(cuDevicePrimaryCtxGetState(dev_, &flags, &active));
  EXPECT_EQ(1, active);
  EXPECT_EQ(0u, flags);

  CUcontext again = nullptr;
  CU(cuDevicePrimaryCtxRetain(&again, dev_));
  EXPECT_EQ(ctx_, again) << "the primary context is one context, however often it is retained";
  CU(cuDevicePrimaryCtxRelease(dev_));
  CU(cuDevicePrimaryCtxGetState(dev_, &flags, &active));
  EXPECT_EQ(1, active) << "still retained once (by the fixture)";

  // The last release deactivates it; a retain brings it back.
  CU(cuDevicePrimaryCtxRelease(dev_));
  retained_ = false;
  CU(cuDevicePrimaryCtxGetState(dev_, &flags, &active));
  EXPECT_EQ(0, active);
  CU(cuDevicePrimaryCtxRetain(&ctx_, dev_));
  retained_ = true;
  CU(cuCtxSetCurrent(ctx_));
  CU(cuDevicePrimaryCtxGetState(dev_, &flags, &active));
  EXPECT_EQ(1, active);
  CUdevice d = -1;
  CU(cuCtxGetDevice(&d));
  EXPECT_EQ(dev_, d);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDevicePrimaryCtxGetState(dev_, nullptr, &active));
}

TEST_F(Sim, CreateV2V3V4PushPopGetSetCurrent) {
  CUcontext current = nullptr, popped = nullptr, c2 = nullptr, c3 = nullptr, c4 = nullptr;
  CU(cuCtxCreate_v2(&c2, 0, dev_));
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(c2, current) << "cuCtxCreate makes the new context current (pushes it)";
  CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(c2, popped);
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(ctx_, current) << "popping returns to the context below";

  CU(cuCtxCreate_v3(&c3, nullptr, 0, 0, dev_));
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(c3, current);
  CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(c3, popped);

  CU(cuCtxCreate_v4(&c4, nullptr, 0, dev_));
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(c4, current);
  CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(c4, popped);
  EXPECT_NE(c2, c3);
  EXPECT_NE(c3, c4);

  // A stack: push c2, push c3; set-current replaces the top; pop walks back down.
  CU(cuCtxPushCurrent(c2));
  CU(cuCtxPushCurrent(c3));
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(c3, current);
  CU(cuCtxSetCurrent(c4));
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(c4, current);
  CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(c4, popped);
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(c2, current);
  CUdevice d = -1;
  CU(cuCtxGetDevice(&d));
  EXPECT_EQ(dev_, d);
  unsigned long long id2 = 0, id3 = 0;
  CU(cuCtxGetId(c2, &id2));
  CU(cuCtxGetId(c3, &id3));
  EXPECT_NE(id2, id3);

  // Memory belongs to the context it was allocated in; destroying the context frees it.
  const std::size_t f0 = free_bytes();
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, 1 * MiB));
  EXPECT_EQ(f0 - 1 * MiB, free_bytes());
  CUcontext owner = nullptr;
  CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p));
  EXPECT_EQ(c2, owner);
  CU(cuCtxPopCurrent(&popped));
  EXPECT_EQ(c2, popped);
  CU(cuCtxDestroy(c2));
  EXPECT_EQ(f0, free_bytes()) << "destroying a context frees its memory";
  CU(cuCtxDestroy(c3));
  CU(cuCtxDestroy(c4));
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(ctx_, current);
}

TEST_F(Sim, DestroyingAContextFreesTheMemoryItOwns) {
  const std::size_t f0 = free_bytes();
  CUcontext c = nullptr;
  CU(cuCtxCreate(&c, nullptr, 0, dev_));
  CUdeviceptr plain = 0, pitched = 0, managed = 0;
  std::size_t pitch = 0;
  CU(cuMemAlloc(&plain, 3 * MiB));
  CU(cuMemAllocPitch(&pitched, &pitch, 1000, 100, 4));
  CU(cuMemAllocManaged(&managed, 1 * MiB, CU_MEM_ATTACH_GLOBAL));
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = 256;
  d.Height = 256;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 4;
  CUarray array = nullptr;
  CUmipmappedArray mipmap = nullptr;
  CU(cuArray3DCreate(&array, &d));
  CU(cuMipmappedArrayCreate(&mipmap, &d, 3));
  EXPECT_LT(free_bytes(), f0 - 3 * MiB - 100 * pitch - 1 * MiB);
  CU(cuCtxDestroy(c));
  EXPECT_EQ(f0, free_bytes()) << "device, pitched, managed memory and arrays go with their context";
}

TEST_F(Sim, DestroyedContextIsInvalid) {
  CUcontext c = nullptr, current = nullptr;
  CU(cuCtxCreate(&c, nullptr, 0, dev_));
  CU(cuCtxDestroy(c));
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(ctx_, current) << "destroying the current context pops it";
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent(c));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxSetCurrent(c));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxDestroy(c));
  unsigned version = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxGetApiVersion(c, &version));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxSynchronize_v2(c));

  // A context destroyed while current to another thread: that thread's calls fail with
  // CUDA_ERROR_CONTEXT_IS_DESTROYED (cuCtxDestroy's documentation).
  CUcontext other = nullptr;
  CU(cuCtxCreate(&other, nullptr, 0, dev_));
  CU(cuCtxPopCurrent(nullptr));
  std::promise<void> made_current, destroyed;
  CUresult alloc_after = CUDA_SUCCESS, sync_after = CUDA_SUCCESS;
  std::thread t([&] {
    EXPECT_CU(CUDA_SUCCESS, cuCtxSetCurrent(other));
    made_current.set_value();
    destroyed.get_future().wait();
    CUdeviceptr p = 0;
    alloc_after = cuMemAlloc(&p, 4096);
    sync_after = cuCtxSynchronize();
  });
  made_current.get_future().wait();
  CU(cuCtxDestroy(other));
  destroyed.set_value();
  t.join();
  EXPECT_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, alloc_after);
  EXPECT_EQ(CUDA_ERROR_CONTEXT_IS_DESTROYED, sync_after);
}

TEST_F(Sim, NoCurrentContext) {
  std::thread t([] {
    CUcontext c = reinterpret_cast<CUcontext>(1);
    EXPECT_CU(CUDA_SUCCESS, cuCtxGetCurrent(&c));
    EXPECT_EQ(nullptr, c);
    CUdeviceptr p = 0;
    std::size_t f = 0, total = 0;
    CUstream s = nullptr;
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuMemAlloc(&p, 4096));
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuMemGetInfo(&f, &total));
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuStreamCreate(&s, 0));
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxSynchronize());
    EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPopCurrent(&c));
  });
  t.join();
}

// ---------------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------------

TEST_F(Sim, MemGetInfoTotalsAndAllocationRounding) {
  std::size_t f0 = 0, total = 0;
  CU(cuMemGetInfo(&f0, &total));
  EXPECT_EQ(kDeviceBytes, total);
  EXPECT_EQ(total, f0) << "nothing is allocated on this process's simulated machine yet";

  // Each allocation is charged its size rounded up to 512 bytes.
  const std::size_t sizes[] = {1, 511, 512, 513, 1000, 4096, 1 * MiB + 1, 3 * MiB, 100 * MiB + 7};
  std::vector<CUdeviceptr> ptrs;
  std::size_t charged = 0;
  for (std::size_t size : sizes) {
    CUdeviceptr p = 0;
    const std::size_t before = free_bytes();
    CU(cuMemAlloc(&p, size));
    ptrs.push_back(p);
    charged += round_up(size, 512);
    EXPECT_EQ(before - round_up(size, 512), free_bytes()) << "cuMemAlloc(" << size << ")";
    EXPECT_EQ(0u, p % 256) << "device pointers are at least 256-byte aligned";
  }
  EXPECT_EQ(f0 - charged, free_bytes());
  for (CUdeviceptr p : ptrs) CU(cuMemFree(p));
  EXPECT_EQ(f0, free_bytes());

  CUdeviceptr p = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(&p, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAlloc(nullptr, 4096));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemGetInfo(nullptr, &total));
}

TEST_F(Sim, AllocationPastTheDeviceIsRefused) {
  const std::size_t f0 = free_bytes();
  CUdeviceptr p = 0, q = 0;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, kDeviceBytes + 1));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, SIZE_MAX));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&p, SIZE_MAX - 100)) << "rounding must not wrap around";
  EXPECT_EQ(f0, free_bytes()) << "a refused allocation charges nothing";

  // The whole device, then nothing more by any path.
  CU(cuMemAlloc(&p, f0));
  EXPECT_EQ(0u, free_bytes());
  std::size_t pitch = 0;
  CUmemGenericAllocationHandle h = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev_;
  CUDA_ARRAY_DESCRIPTOR ad{};
  ad.Width = 64;
  ad.Height = 64;
  ad.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  ad.NumChannels = 1;
  CUarray array = nullptr;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&q, 1));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocPitch(&q, &pitch, 512, 1, 4));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocManaged(&q, 4096, CU_MEM_ATTACH_GLOBAL));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAllocAsync(&q, 4096, nullptr));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemCreate(&h, kGranularity, &prop, 0));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuArrayCreate(&array, &ad));
  EXPECT_EQ(0u, free_bytes()) << "refusals change nothing";
  CU(cuMemFree(p));
  EXPECT_EQ(f0, free_bytes());
  CU(cuMemAlloc(&q, 1 * MiB));  // memory can be allocated again as soon as it is freed
  CU(cuMemFree(q));
}

TEST_F(Sim, AllocPitchRoundsTheWidthUpTo512AndChargesPitchTimesHeight) {
  struct Case {
    std::size_t width, height;
    unsigned elem;
    std::size_t pitch;
  };
  const Case cases[] = {{1, 1, 4, 512},       {100, 7, 4, 512},   {512, 3, 4, 512},   {513, 2, 8, 1024},
                        {1000, 10, 16, 1024}, {4096, 5, 4, 4096}, {4097, 3, 16, 4608}};
  for (const Case& c : cases) {
    const std::size_t before = free_bytes();
    CUdeviceptr p = 0;
    std::size_t pitch = 0;
    CU(cuMemAllocPitch(&p, &pitch, c.width, c.height, c.elem)) << c.width << " x " << c.height;
    EXPECT_EQ(c.pitch, pitch) << "width " << c.width;
    EXPECT_EQ(before - pitch * c.height, free_bytes()) << "width " << c.width << " height " << c.height;
    CUdeviceptr base = 0;
    std::size_t size = 0;
    CU(cuMemGetAddressRange(&base, &size, p));
    EXPECT_EQ(p, base);
    EXPECT_EQ(pitch * c.height, size);
    CU(cuMemFree(p));
    EXPECT_EQ(before, free_bytes());
  }
  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&p, &pitch, 100, 10, 3));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&p, &pitch, 0, 10, 4));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&p, &pitch, 100, 0, 4));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAllocPitch(&p, nullptr, 100, 10, 4));
}

TEST_F(Sim, ManagedMemoryIsChargedHostMemoryIsNot) {
  const std::size_t f0 = free_bytes();
  CUdeviceptr m = 0;
  CU(cuMemAllocManaged(&m, 10000, CU_MEM_ATTACH_GLOBAL));
  EXPECT_EQ(f0 - 10240, free_bytes());
  *reinterpret_cast<volatile int*>(m) = 42;  // managed memory is reachable from the host
  EXPECT_EQ(42, *reinterpret_cast<volatile int*>(m));
  int managed = 0;
  CU(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
  EXPECT_EQ(1, managed);
  CUdeviceptr bad = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemAllocManaged(&bad, 4096, 0));

  void* h1 = nullptr;
  void* h2 = nullptr;
  CU(cuMemHostAlloc(&h1, 4 * MiB, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
  CU(cuMemAllocHost(&h2, 4 * MiB));
  EXPECT_EQ(f0 - 10240, free_bytes()) << "pinned host memory is not device memory";
  std::memset(h1, 0x11, 4 * MiB);
  std::memset(h2, 0x22, 4 * MiB);
  unsigned flags = 0;
  CU(cuMemHostGetFlags(&flags, h1));
  EXPECT_EQ(static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP), flags);
  unsigned type = 0;
  CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, reinterpret_cast<CUdeviceptr>(h2)));
  EXPECT_EQ(static_cast<unsigned>(CU_MEMORYTYPE_HOST), type);
  std::vector<char> user(64 * KiB);
  CU(cuMemHostRegister(user.data(), user.size(), 0));
  EXPECT_EQ(f0 - 10240, free_bytes()) << "registered host memory is not device memory";
  CU(cuMemHostUnregister(user.data()));
  CU(cuMemFreeHost(h1));
  CU(cuMemFreeHost(h2));
  CU(cuMemFree(m));
  EXPECT_EQ(f0, free_bytes());
}

TEST_F(Sim, FreeOfUnknownOrFreedPointersIsInvalidValue) {
  const std::size_t f0 = free_bytes();
  int on_stack = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(reinterpret_cast<CUdeviceptr>(&on_stack)));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(static_cast<CUdeviceptr>(0xdead0000ull)));
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, 8192));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(p + 512)) << "an interior pointer is not an allocation";
  CU(cuMemFree(p));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(p)) << "double free";
  EXPECT_EQ(f0, free_bytes());
  void* h = nullptr;
  CU(cuMemAllocHost(&h, 4096));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(reinterpret_cast<CUdeviceptr>(h)));
  CU(cuMemFreeHost(h));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFreeHost(h));
  EXPECT_EQ(f0, free_bytes());
}

TEST_F(Sim, AddressRangeAndPointerAttributes) {
  CUdeviceptr p = 0, q = 0;
  CU(cuMemAlloc(&p, 1000));
  CU(cuMemAlloc(&q, 1000));
  CUdeviceptr base = 0;
  std::size_t size = 0;
  CU(cuMemGetAddressRange(&base, &size, p + 100));
  EXPECT_EQ(p, base);
  EXPECT_EQ(1000u, size);

  unsigned type = 0;
  int ordinal = -1;
  CUcontext owner = nullptr;
  CUdeviceptr start = 0, dptr = 0;
  std::size_t range = 0;
  unsigned long long id_p = 0, id_q = 0;
  CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p + 100));
  EXPECT_EQ(static_cast<unsigned>(CU_MEMORYTYPE_DEVICE), type);
  CU(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p + 100));
  EXPECT_EQ(dev_, ordinal);
  CU(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, p));
  EXPECT_EQ(ctx_, owner);
  CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 100));
  EXPECT_EQ(p, start);
  CU(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p + 100));
  EXPECT_EQ(1000u, range);
  CU(cuPointerGetAttribute(&dptr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, p + 100));
  EXPECT_EQ(p + 100, dptr);
  CU(cuPointerGetAttribute(&id_p, CU_POINTER_ATTRIBUTE_BUFFER_ID, p));
  CU(cuPointerGetAttribute(&id_q, CU_POINTER_ATTRIBUTE_BUFFER_ID, q));
  EXPECT_NE(id_p, id_q);

  // A pointer the driver does not know.
  int on_stack = 0;
  const auto unknown = reinterpret_cast<CUdeviceptr>(&on_stack);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, unknown));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, unknown));
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, unknown));
  // cuPointerGetAttributes does not fail on it: it reports no memory type and no context.
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
  type = 99;
  owner = reinterpret_cast<CUcontext>(1);
  void* data[] = {&type, &owner};
  CU(cuPointerGetAttributes(2, attrs, data, unknown));
  EXPECT_EQ(0u, type);
  EXPECT_EQ(nullptr, owner);
  CU(cuMemFree(p));
  CU(cuMemFree(q));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p))
      << "freed memory is unknown";
}

TEST_F(Sim, CopiesAndSetsRoundTrip) {
  constexpr std::size_t n = 4096;
  std::vector<std::uint32_t> src(n), dst(n, 0);
  for (std::size_t i = 0; i < n; ++i) src[i] = static_cast<std::uint32_t>(i * 2654435761u);
  const std::size_t bytes = n * sizeof(std::uint32_t);
  CUdeviceptr a = 0, b = 0;
  CU(cuMemAlloc(&a, bytes));
  CU(cuMemAlloc(&b, bytes));

  CU(cuMemcpyHtoD(a, src.data(), bytes));
  CU(cuMemcpyDtoD(b, a, bytes));
  CU(cuMemcpyDtoH(dst.data(), b, bytes));
  EXPECT_EQ(src, dst);
  std::fill(dst.begin(), dst.end(), 0);
  CU(cuMemcpy(a, b, bytes));  // unified addressing
  CU(cuMemcpyDtoH(dst.data(), a, bytes));
  EXPECT_EQ(src, dst);

  // Asynchronous copies through pinned memory, in stream order.
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  void* pinned = nullptr;
  CU(cuMemAllocHost(&pinned, bytes));
  std::vector<std::uint32_t> src2(n);
  for (std::size_t i = 0; i < n; ++i) src2[i] = static_cast<std::uint32_t>(n - i);
  CU(cuMemcpyHtoDAsync(a, src2.data(), bytes, s));
  CU(cuMemcpyDtoDAsync(b, a, bytes, s));
  CU(cuMemcpyDtoHAsync(pinned, b, bytes, s));
  CU(cuStreamSynchronize(s));
  EXPECT_EQ(0, std::memcmp(pinned, src2.data(), bytes));

  // Memsets of 8, 16 and 32 bits, touching exactly the elements asked for.
  std::vector<std::uint8_t> raw(bytes);
  CU(cuMemsetD32(a, 0, n));
  CU(cuMemsetD8(a, 0xAB, 3));
  CU(cuMemcpyDtoH(raw.data(), a, 8));
  EXPECT_EQ((std::vector<std::uint8_t>{0xAB, 0xAB, 0xAB, 0, 0, 0, 0, 0}),
            std::vector<std::uint8_t>(raw.begin(), raw.begin() + 8));
  CU(cuMemsetD16(a, 0xBEEF, 3));
  std::uint16_t halves[4] = {};
  CU(cuMemcpyDtoH(halves, a, sizeof halves));
  EXPECT_EQ(0xBEEF, halves[0]);
  EXPECT_EQ(0xBEEF, halves[2]);
  EXPECT_EQ(0, halves[3]);
  CU(cuMemsetD32(a, 0xDEADBEEFu, n));
  CU(cuMemcpyDtoH(dst.data(), a, bytes));
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](std::uint32_t v) { return v == 0xDEADBEEFu; }));
  CU(cuMemsetD32Async(b, 7, n, s));
  CU(cuStreamSynchronize(s));
  CU(cuMemcpyDtoH(dst.data(), b, bytes));
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](std::uint32_t v) { return v == 7; }));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD32(a + 1, 0, 4)) << "cuMemsetD32 needs 4-byte alignment";

  // 2D: a packed host image into a pitched allocation and back into a padded host buffer.
  constexpr std::size_t w = 300, h = 7;
  std::vector<std::uint8_t> image(w * h), back(320 * h, 0xEE);
  for (std::size_t i = 0; i < image.size(); ++i) image[i] = static_cast<std::uint8_t>(i * 7 + 3);
  CUdeviceptr pitched = 0;
  std::size_t pitch = 0;
  CU(cuMemAllocPitch(&pitched, &pitch, w, h, 4));
  ASSERT_EQ(512u, pitch);
  CU(cuMemsetD2D8(pitched, pitch, 0, pitch, h));
  CUDA_MEMCPY2D up{};
  up.srcMemoryType = CU_MEMORYTYPE_HOST;
  up.srcHost = image.data();
  up.srcPitch = w;
  up.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  up.dstDevice = pitched;
  up.dstPitch = pitch;
  up.WidthInBytes = w;
  up.Height = h;
  CU(cuMemcpy2D(&up));
  CUDA_MEMCPY2D down{};
  down.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  down.srcDevice = pitched;
  down.srcPitch = pitch;
  down.dstMemoryType = CU_MEMORYTYPE_HOST;
  down.dstHost = back.data();
  down.dstPitch = 320;
  down.WidthInBytes = w;
  down.Height = h;
  CU(cuMemcpy2DAsync(&down, s));
  CU(cuStreamSynchronize(s));
  for (std::size_t y = 0; y < h; ++y) {
    EXPECT_EQ(0, std::memcmp(&back[y * 320], &image[y * w], w)) << "row " << y;
    EXPECT_EQ(0xEE, back[y * 320 + w]) << "the padding of row " << y << " is untouched";
  }
  std::uint8_t tail = 0xFF;
  CU(cuMemcpyDtoH(&tail, pitched + w, 1));
  EXPECT_EQ(0, tail) << "the pitch padding on the device is untouched";

  // Copies that name memory the driver does not know, or run past an allocation.
  const auto nowhere = static_cast<CUdeviceptr>(0xdead0000ull);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(nowhere, src.data(), 16));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(dst.data(), nowhere, 16));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoD(nowhere, a, 16));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoDAsync(nowhere, src.data(), 16, s));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemsetD8(nowhere, 0, 16));
  std::vector<std::uint8_t> big(2 * bytes);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyHtoD(a, big.data(), big.size()));

  CU(cuStreamDestroy(s));
  CU(cuMemFreeHost(pinned));
  CU(cuMemFree(pitched));
  CU(cuMemFree(a));
  CU(cuMemFree(b));
}

// ---------------------------------------------------------------------------------------------
// Stream-ordered allocation and memory pools
// ---------------------------------------------------------------------------------------------

class SimPool : public Sim {
 protected:
  void SetUp() override {
    Sim::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_CU(CUDA_SUCCESS, cuDeviceGetDefaultMemPool(&pool_, dev_));
    CUmemoryPool current = nullptr;
    ASSERT_CU(CUDA_SUCCESS, cuDeviceGetMemPool(&current, dev_));
    EXPECT_EQ(pool_, current);
    ASSERT_CU(CUDA_SUCCESS, cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING));
    ASSERT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    cuuint64_t zero = 0;  // the default pool outlives each test: start its high watermarks afresh
    ASSERT_CU(CUDA_SUCCESS, cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
    ASSERT_CU(CUDA_SUCCESS, cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    f0_ = free_bytes();
  }
  void TearDown() override {
    if (pool_) {
      cuuint64_t zero = 0;
      EXPECT_CU(CUDA_SUCCESS, cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &zero));
      EXPECT_CU(CUDA_SUCCESS, cuMemPoolTrimTo(pool_, 0));
    }
    if (s_) {
      EXPECT_CU(CUDA_SUCCESS, cuStreamDestroy(s_));
    }
    Sim::TearDown();
  }
  CUmemoryPool pool_ = nullptr;
  CUstream s_ = nullptr;
  std::size_t f0_ = 0;
};

TEST_F(SimPool, FreedMemoryStaysReservedUntilSynchronize) {
  CUdeviceptr p = 0;
  CU(cuMemAllocAsync(&p, 1 * MiB, s_));
  EXPECT_EQ(f0_ - kGranularity, free_bytes()) << "a pool reserves whole 2 MiB chunks";
  EXPECT_EQ(kGranularity, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_EQ(1 * MiB, pool_attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  CUmemoryPool from = nullptr;
  CU(cuPointerGetAttribute(&from, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
  EXPECT_EQ(pool_, from);
  CU(cuMemsetD8Async(p, 0x5A, 1 * MiB, s_));  // usable in stream order
  CU(cuMemFreeAsync(p, s_));
  EXPECT_EQ(f0_ - kGranularity, free_bytes()) << "before a synchronisation the pool keeps what was freed into it";
  EXPECT_EQ(kGranularity, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  EXPECT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)) << "release threshold 0";
  EXPECT_EQ(f0_, free_bytes());
}

TEST_F(SimPool, EventAndContextSynchronizeTrimToo) {
  // "the allocator will try to release memory back to the OS on the next call to stream, event or
  // context synchronize" (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD).
  CUevent ev = nullptr;
  CU(cuEventCreate(&ev, CU_EVENT_DEFAULT));
  CUdeviceptr p = 0;
  CU(cuMemAllocAsync(&p, 1 * MiB, s_));
  CU(cuMemFreeAsync(p, s_));
  CU(cuEventRecord(ev, s_));
  CU(cuEventSynchronize(ev));
  EXPECT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)) << "after cuEventSynchronize";
  EXPECT_EQ(f0_, free_bytes());

  CU(cuMemAllocAsync(&p, 1 * MiB, s_));
  CU(cuMemFreeAsync(p, s_));
  CU(cuCtxSynchronize());
  EXPECT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)) << "after cuCtxSynchronize";
  EXPECT_EQ(f0_, free_bytes());
  CU(cuEventDestroy(ev));
}

TEST_F(SimPool, MaximalReleaseThresholdKeepsMemoryUntilTrimTo) {
  cuuint64_t keep_all = UINT64_MAX;
  CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
  EXPECT_EQ(UINT64_MAX, pool_attr(pool_, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD));
  CUdeviceptr p = 0;
  CU(cuMemAllocAsync(&p, 1 * MiB, s_));
  CU(cuMemFreeAsync(p, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  EXPECT_EQ(kGranularity, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)) << "kept across the sync";
  EXPECT_EQ(f0_ - kGranularity, free_bytes());
  CU(cuCtxSynchronize());
  EXPECT_EQ(f0_ - kGranularity, free_bytes());

  // The kept memory is reused without growing the pool.
  CU(cuMemAllocAsync(&p, 1 * MiB, s_));
  EXPECT_EQ(f0_ - kGranularity, free_bytes());
  CU(cuMemFreeAsync(p, s_));
  CU(cuStreamSynchronize(s_));

  CU(cuMemPoolTrimTo(pool_, 0));
  EXPECT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_EQ(f0_, free_bytes());
}

TEST_F(SimPool, ReserveGranularityUsedAndHighWatermarks) {
  CUdeviceptr a = 0, b = 0, c = 0;
  CU(cuMemAllocAsync(&a, 3 * MiB, s_));
  EXPECT_EQ(4 * MiB, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_EQ(3 * MiB, pool_attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  EXPECT_EQ(f0_ - 4 * MiB, free_bytes());
  CU(cuMemAllocAsync(&b, 1000, s_));  // fits in what is reserved; rounded to 512 bytes
  EXPECT_EQ(4 * MiB, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_EQ(3 * MiB + 1024, pool_attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_CURRENT));
  EXPECT_EQ(f0_ - 4 * MiB, free_bytes());
  CU(cuMemAllocAsync(&c, 1 * MiB, s_));  // needs one more chunk
  EXPECT_EQ(6 * MiB, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_EQ(f0_ - 6 * MiB, free_bytes());
  for (CUdeviceptr p : {a, b, c}) CU(cuMemFreeAsync(p, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(f0_, free_bytes());
  EXPECT_EQ(6 * MiB, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH));
  EXPECT_EQ(4 * MiB + 1024, pool_attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH));
  cuuint64_t zero = 0;
  CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH, &zero));
  CU(cuMemPoolSetAttribute(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
  EXPECT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH));
  EXPECT_EQ(0u, pool_attr(pool_, CU_MEMPOOL_ATTR_USED_MEM_HIGH));

  // An explicit pool behaves the same, and destroying it returns what it held.
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = dev_;
  CUmemoryPool mine = nullptr;
  CU(cuMemPoolCreate(&mine, &props));
  cuuint64_t keep_all = UINT64_MAX;
  CU(cuMemPoolSetAttribute(mine, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep_all));
  CU(cuMemAllocFromPoolAsync(&a, 5 * MiB, mine, s_));
  EXPECT_EQ(f0_ - 6 * MiB, free_bytes());
  CU(cuMemFreeAsync(a, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(f0_ - 6 * MiB, free_bytes());
  CU(cuMemPoolDestroy(mine));
  EXPECT_EQ(f0_, free_bytes());
}

// ---------------------------------------------------------------------------------------------
// Virtual memory management
// ---------------------------------------------------------------------------------------------

TEST_F(Sim, VirtualMemoryCreateReserveMapAliasRelease) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev_;
  std::size_t g_min = 0, g_rec = 0;
  CU(cuMemGetAllocationGranularity(&g_min, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CU(cuMemGetAllocationGranularity(&g_rec, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  EXPECT_EQ(kGranularity, g_min);
  EXPECT_EQ(kGranularity, g_rec);

  const std::size_t f0 = free_bytes();
  CUmemGenericAllocationHandle h = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, 3 * MiB, &prop, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemCreate(&h, 0, &prop, 0));
  EXPECT_EQ(f0, free_bytes());
  CU(cuMemCreate(&h, kGranularity, &prop, 0));
  EXPECT_EQ(f0 - kGranularity, free_bytes()) << "cuMemCreate charges the physical memory";

  CUdeviceptr va = 0;
  CU(cuMemAddressReserve(&va, 2 * kGranularity, 0, 0, 0));
  EXPECT_EQ(f0 - kGranularity, free_bytes()) << "address space is not memory";
  EXPECT_EQ(0u, va % kGranularity);
  CU(cuMemMap(va, kGranularity, 0, h, 0));
  CU(cuMemMap(va + kGranularity, kGranularity, 0, h, 0));
  // Mapping over a mapping fails (cuMemMap's documentation does not name the error).
  EXPECT_NE(CUDA_SUCCESS, cuMemMap(va, kGranularity, 0, h, 0));
  EXPECT_EQ(f0 - kGranularity, free_bytes()) << "two mappings of one allocation are one allocation";
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU(cuMemSetAccess(va, 2 * kGranularity, &access, 1));

  // Written through one mapping, read through the other.
  std::vector<std::uint32_t> pattern(1024), seen(1024, 0);
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<std::uint32_t>(i ^ 0xA5A5A5A5u);
  CU(cuMemcpyHtoD(va + 4096, pattern.data(), pattern.size() * 4));
  CU(cuMemcpyDtoH(seen.data(), va + kGranularity + 4096, seen.size() * 4));
  EXPECT_EQ(pattern, seen);
  CU(cuMemsetD32(va + kGranularity, 0x01020304u, 1));
  std::uint32_t first = 0;
  CU(cuMemcpyDtoH(&first, va, 4));
  EXPECT_EQ(0x01020304u, first);

  // Pointer ranges: the attribute names the reservation, cuMemGetAddressRange the mapping.
  CUdeviceptr start = 0, base = 0;
  std::size_t range = 0, size = 0;
  unsigned type = 0;
  CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, va + kGranularity + 8));
  EXPECT_EQ(static_cast<unsigned>(CU_MEMORYTYPE_DEVICE), type);
  CU(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, va + kGranularity + 8));
  CU(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, va + kGranularity + 8));
  EXPECT_EQ(va, start);
  EXPECT_EQ(2 * kGranularity, range);
  CU(cuMemGetAddressRange(&base, &size, va + kGranularity + 8));
  EXPECT_EQ(va + kGranularity, base);
  EXPECT_EQ(kGranularity, size);

  // A retained handle is the same handle and needs its own release.
  CUmemGenericAllocationHandle retained = 0;
  CU(cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(va + kGranularity + 100)));
  EXPECT_EQ(h, retained);
  CU(cuMemRelease(retained));
  CUmemAllocationProp got{};
  CU(cuMemGetAllocationPropertiesFromHandle(&got, h));
  EXPECT_EQ(dev_, got.location.id);

  // Released while mapped: the memory stays charged until the last mapping goes.
  CU(cuMemRelease(h));
  EXPECT_EQ(f0 - kGranularity, free_bytes());
  CU(cuMemUnmap(va, kGranularity));
  EXPECT_EQ(f0 - kGranularity, free_bytes());
  CU(cuMemUnmap(va + kGranularity, kGranularity));
  EXPECT_EQ(f0, free_bytes()) << "unmapped and released: returned";
  CU(cuMemAddressFree(va, 2 * kGranularity));

  // Unmap first, then release.
  CU(cuMemCreate(&h, 2 * kGranularity, &prop, 0));
  EXPECT_EQ(f0 - 2 * kGranularity, free_bytes());
  CU(cuMemAddressReserve(&va, 2 * kGranularity, 0, 0, 0));
  CU(cuMemMap(va, 2 * kGranularity, 0, h, 0));
  CU(cuMemUnmap(va, 2 * kGranularity));
  EXPECT_EQ(f0 - 2 * kGranularity, free_bytes());
  CU(cuMemRelease(h));
  EXPECT_EQ(f0, free_bytes());
  CU(cuMemAddressFree(va, 2 * kGranularity));
}

// ---------------------------------------------------------------------------------------------
// Arrays
// ---------------------------------------------------------------------------------------------

// What an array of this description needs, as the driver reports it: only for an array created with
// CUDA_ARRAY3D_DEFERRED_MAPPING, which has no memory until mapped and so is not charged.
std::size_t array_requirement(CUDA_ARRAY3D_DESCRIPTOR d, CUdevice dev) {
  d.Flags |= CUDA_ARRAY3D_DEFERRED_MAPPING;
  const std::size_t before = free_bytes();
  CUarray probe = nullptr;
  EXPECT_CU(CUDA_SUCCESS, cuArray3DCreate(&probe, &d));
  EXPECT_EQ(before, free_bytes()) << "a deferred-mapping array has no memory of its own";
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  EXPECT_CU(CUDA_SUCCESS, cuArrayGetMemoryRequirements(&req, probe, dev));
  EXPECT_CU(CUDA_SUCCESS, cuArrayDestroy(probe));
  EXPECT_GT(req.size, 0u);
  EXPECT_GT(req.alignment, 0u);
  return req.size;
}

TEST_F(Sim, ArraysAreChargedWhatTheirMemoryRequirementsSay) {
  const std::size_t f0 = free_bytes();
  CUDA_ARRAY3D_DESCRIPTOR d2{};
  d2.Width = 1000;
  d2.Height = 100;
  d2.Format = CU_AD_FORMAT_FLOAT;
  d2.NumChannels = 1;
  const std::size_t need2 = array_requirement(d2, dev_);
  CUDA_ARRAY_DESCRIPTOR flat{};
  flat.Width = d2.Width;
  flat.Height = d2.Height;
  flat.Format = d2.Format;
  flat.NumChannels = d2.NumChannels;
  CUarray a = nullptr;
  CU(cuArrayCreate(&a, &flat));
  EXPECT_EQ(f0 - need2, free_bytes());
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuArrayGetMemoryRequirements(&req, a, dev_))
      << "only deferred-mapping arrays have memory requirements";
  CUDA_ARRAY_DESCRIPTOR got{};
  CU(cuArrayGetDescriptor(&got, a));
  EXPECT_EQ(1000u, got.Width);
  EXPECT_EQ(100u, got.Height);

  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 64;
  d3.Height = 64;
  d3.Depth = 8;
  d3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d3.NumChannels = 4;
  const std::size_t need3 = array_requirement(d3, dev_);
  CUarray b = nullptr;
  CU(cuArray3DCreate(&b, &d3));
  EXPECT_EQ(f0 - need2 - need3, free_bytes());
  CU(cuArrayDestroy(a));
  EXPECT_EQ(f0 - need3, free_bytes());
  CU(cuArrayDestroy(b));
  EXPECT_EQ(f0, free_bytes());

  CUDA_ARRAY3D_DESCRIPTOR bad = d3;
  bad.NumChannels = 3;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuArray3DCreate(&b, &bad));
  EXPECT_EQ(f0, free_bytes());
}

TEST_F(Sim, MipmappedArraysAreChargedWhatTheirMemoryRequirementsSay) {
  const std::size_t f0 = free_bytes();
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = 512;
  d.Height = 256;
  d.Format = CU_AD_FORMAT_HALF;
  d.NumChannels = 2;
  CUDA_ARRAY3D_DESCRIPTOR deferred = d;
  deferred.Flags = CUDA_ARRAY3D_DEFERRED_MAPPING;
  CUmipmappedArray probe = nullptr;
  CU(cuMipmappedArrayCreate(&probe, &deferred, 5));
  EXPECT_EQ(f0, free_bytes()) << "a deferred-mapping mipmapped array has no memory of its own";
  CUDA_ARRAY_MEMORY_REQUIREMENTS req{};
  CU(cuMipmappedArrayGetMemoryRequirements(&req, probe, dev_));
  CU(cuMipmappedArrayDestroy(probe));
  EXPECT_GT(req.size, 0u);

  CUmipmappedArray m = nullptr;
  CU(cuMipmappedArrayCreate(&m, &d, 5));
  EXPECT_EQ(f0 - req.size, free_bytes());
  CUDA_ARRAY_MEMORY_REQUIREMENTS none{};
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayGetMemoryRequirements(&none, m, dev_));
  CUarray level = nullptr;
  CU(cuMipmappedArrayGetLevel(&level, m, 4));
  CUDA_ARRAY3D_DESCRIPTOR ld{};
  CU(cuArray3DGetDescriptor(&ld, level));
  EXPECT_EQ(32u, ld.Width);
  EXPECT_EQ(16u, ld.Height);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMipmappedArrayGetLevel(&level, m, 5));
  CU(cuMipmappedArrayDestroy(m));
  EXPECT_EQ(f0, free_bytes());
}

// ---------------------------------------------------------------------------------------------
// Modules and libraries
// ---------------------------------------------------------------------------------------------

TEST_F(SimKernels, LoadPtxCubinAndFatbinByFileAndByBytes) {
  for (const char* file :
       {"sample_kernels.ptx", "sample_kernels_sm89.cubin", "sample_kernels_sm80.cubin", "sample_kernels.fatbin"}) {
    SCOPED_TRACE(file);
    std::string bytes = read_bytes(kernel_file(file));
    ASSERT_FALSE(bytes.empty()) << kernel_file(file);
    bytes.push_back('\0');  // PTX is handed over as a NUL-terminated string
    CUmodule by_file = nullptr, by_bytes = nullptr;
    ASSERT_CU(CUDA_SUCCESS, cuModuleLoad(&by_file, kernel_file(file).c_str()));
    ASSERT_CU(CUDA_SUCCESS, cuModuleLoadData(&by_bytes, bytes.data()));
    for (CUmodule m : {by_file, by_bytes}) {
      for (const char* kernel : {"spin", "noop", kScaleKernel}) {
        CUfunction f = nullptr;
        EXPECT_CU(CUDA_SUCCESS, cuModuleGetFunction(&f, m, kernel)) << kernel;
        EXPECT_NE(nullptr, f);
      }
      CUfunction f = nullptr;
      EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&f, m, "no_such_kernel"));
      EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetFunction(&f, m, "scale")) << "C++ kernels keep their mangled name";
      unsigned count = 0;
      EXPECT_CU(CUDA_SUCCESS, cuModuleGetFunctionCount(&count, m));
      EXPECT_EQ(3u, count);
      CUdeviceptr g = 0;
      std::size_t size = 0;
      EXPECT_CU(CUDA_SUCCESS, cuModuleGetGlobal(&g, &size, m, "counter"));
      EXPECT_EQ(16u, size);
      EXPECT_CU(CUDA_SUCCESS, cuModuleGetGlobal(&g, &size, m, "coeffs"));
      EXPECT_EQ(32u, size);
      EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuModuleGetGlobal(&g, &size, m, "no_such_global"));
    }
    CU(cuModuleUnload(by_file));
    CU(cuModuleUnload(by_bytes));
  }
}

TEST_F(SimKernels, LoadErrors) {
  CUmodule m = nullptr;
  const unsigned char garbage[64] = {0xde, 0xad, 0xbe, 0xef, 0x01, 0x02, 0x03, 0x04};
  const CUresult r = cuModuleLoadData(&m, garbage);
  EXPECT_TRUE(r == CUDA_ERROR_INVALID_IMAGE || r == CUDA_ERROR_INVALID_PTX) << ::testing::PrintToString(r);
  const CUresult t = cuModuleLoadData(&m, "this is not a module");
  EXPECT_TRUE(t == CUDA_ERROR_INVALID_IMAGE || t == CUDA_ERROR_INVALID_PTX) << ::testing::PrintToString(t);
  EXPECT_CU(CUDA_ERROR_FILE_NOT_FOUND, cuModuleLoad(&m, "/nonexistent/kernels.cubin"));
  // Cubins for another major architecture do not run on an 8.9 device.
  EXPECT_CU(CUDA_ERROR_NO_BINARY_FOR_GPU, cuModuleLoad(&m, kernel_file("sample_kernels_sm75.cubin").c_str()));
  EXPECT_CU(CUDA_ERROR_NO_BINARY_FOR_GPU, cuModuleLoad(&m, kernel_file("sample_kernels_sm90.cubin").c_str()));
  CUfunction f = nullptr;
  CUmodule gone = nullptr;
  CU(cuModuleLoad(&gone, kernel_file("sample_kernels.ptx").c_str()));
  CU(cuModuleUnload(gone));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuModuleGetFunction(&f, gone, "spin"));
}

TEST_F(SimKernels, ModuleGlobalCounterIsDeviceMemory) {
  CUdeviceptr counter = 0;
  std::size_t size = 0;
  CU(cuModuleGetGlobal(&counter, &size, module_, "counter"));
  ASSERT_EQ(16u, size);
  const int in[4] = {1, 2, 3, 4};
  int out[4] = {};
  CU(cuMemcpyHtoD(counter, in, sizeof in));
  CU(cuMemcpyDtoH(out, counter, sizeof out));
  EXPECT_EQ(0, std::memcmp(in, out, sizeof in));
  CU(cuMemsetD32(counter + 4, 9, 2));
  CU(cuMemcpyDtoH(out, counter, sizeof out));
  EXPECT_EQ(1, out[0]);
  EXPECT_EQ(9, out[1]);
  EXPECT_EQ(9, out[2]);
  EXPECT_EQ(4, out[3]);
  std::size_t param_offset = 99, param_size = 0;
  CU(cuFuncGetParamInfo(spin_, 0, &param_offset, &param_size));
  EXPECT_EQ(0u, param_offset);
  EXPECT_EQ(8u, param_size);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuFuncGetParamInfo(spin_, 1, &param_offset, &param_size));
}

TEST_F(SimKernels, LibraryKernelLaunchesDirectly) {
  const std::string fatbin = read_bytes(kernel_file("sample_kernels.fatbin"));
  ASSERT_FALSE(fatbin.empty());
  CUlibrary lib = nullptr;
  CU(cuLibraryLoadData(&lib, fatbin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0));
  CUkernel spin = nullptr, missing = nullptr;
  CU(cuLibraryGetKernel(&spin, lib, "spin"));
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuLibraryGetKernel(&missing, lib, "no_such_kernel"));
  unsigned count = 0;
  CU(cuLibraryGetKernelCount(&count, lib));
  EXPECT_EQ(3u, count);
  CUdeviceptr g = 0;
  std::size_t size = 0;
  CU(cuLibraryGetGlobal(&g, &size, lib, "counter"));
  EXPECT_EQ(16u, size);

  // A CUkernel is accepted wherever a CUfunction is (cuLaunchKernel's documentation).
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  auto t0 = Clock::now();
  CU(launch_spin(reinterpret_cast<CUfunction>(spin), 5 * kMs, s));
  CU(cuStreamSynchronize(s));
  EXPECT_GE(ms_since(t0), 5.0);
  CUfunction f = nullptr;
  CU(cuKernelGetFunction(&f, spin));
  t0 = Clock::now();
  CU(launch_spin(f, 5 * kMs, s));
  CU(cuStreamSynchronize(s));
  EXPECT_GE(ms_since(t0), 5.0);
  const char* name = nullptr;
  CU(cuKernelGetName(&name, spin));
  EXPECT_STREQ("spin", name);
  CU(cuStreamDestroy(s));
  CU(cuLibraryUnload(lib));
}

// ---------------------------------------------------------------------------------------------
// Launches, streams and events
// ---------------------------------------------------------------------------------------------

TEST_F(SimKernels, SpinKernelTakesItsTimeOnTheDeviceAndTheWall) {
  CUstream s = nullptr;
  CUevent e0 = nullptr, e1 = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  float ms = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, e0, e1)) << "events not recorded yet";
  const auto t0 = Clock::now();
  CU(cuEventRecord(e0, s));
  CU(launch_spin(spin_, 20 * kMs, s));
  CU(cuEventRecord(e1, s));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuEventQuery(e1));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuEventElapsedTime(&ms, e0, e1));
  CU(cuStreamSynchronize(s));
  EXPECT_GE(ms_since(t0), 20.0);
  EXPECT_CU(CUDA_SUCCESS, cuEventQuery(e1));
  EXPECT_NEAR(20.0, elapsed_ms(e0, e1), 2.0);

  // The same through the launch's `extra` parameter buffer.
  unsigned long long ns = 10 * kMs;
  std::size_t size = sizeof ns;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &ns, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  CU(cuEventRecord(e0, s));
  CU(cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, s, nullptr, extra));
  CU(cuEventRecord(e1, s));
  CU(cuEventSynchronize(e1));
  EXPECT_NEAR(10.0, elapsed_ms(e0, e1), 2.0);

  CUevent untimed = nullptr;
  CU(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
  CU(cuEventRecord(untimed, s));
  CU(cuStreamSynchronize(s));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuEventElapsedTime(&ms, e0, untimed));
  for (CUevent e : {e0, e1, untimed}) CU(cuEventDestroy(e));
  CU(cuStreamDestroy(s));
}

TEST_F(SimKernels, OtherKernelsTakeTenMicroseconds) {
  CUstream s = nullptr;
  CUevent e0 = nullptr, e1 = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CU(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  // A spin kernel first, so that the 100 kernels are all queued when the device reaches them.
  CU(launch_spin(spin_, 5 * kMs, s));
  CU(cuEventRecord(e0, s));
  for (int i = 0; i < 100; ++i) CU(cuLaunchKernel(noop_, 1, 1, 1, 32, 1, 1, 0, s, nullptr, nullptr));
  CU(cuEventRecord(e1, s));
  CU(cuStreamSynchronize(s));
  const float ms = elapsed_ms(e0, e1);
  EXPECT_GE(ms, 0.8) << "100 kernels of 10 us";
  EXPECT_LE(ms, 3.0) << "100 kernels of 10 us";
  CU(cuEventDestroy(e0));
  CU(cuEventDestroy(e1));
  CU(cuStreamDestroy(s));
}

TEST_F(SimKernels, InvalidLaunchConfigurations) {
  unsigned long long ns = 1000;
  void* args[] = {&ns};
  auto launch = [&](unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned shmem) {
    return cuLaunchKernel(spin_, gx, gy, gz, bx, by, bz, shmem, nullptr, args, nullptr);
  };
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(0, 1, 1, 1, 1, 1, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(1, 0, 1, 1, 1, 1, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(1, 1, 1, 0, 1, 1, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(1, 1, 1, 1025, 1, 1, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(1, 1, 1, 32, 33, 1, 0)) << "1056 threads in a block";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(1, 1, 1, 1, 1, 65, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(1, 65536, 1, 1, 1, 1, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(1, 1, 65536, 1, 1, 1, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, launch(1, 1, 1, 1, 1, 1, 200 * 1024)) << "too much shared memory";
  unsigned long long buffer = 1000;
  std::size_t size = sizeof buffer;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &buffer, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, nullptr, args, extra))
      << "parameters and extra together";
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  CUmodule other = nullptr;
  CUfunction stale = nullptr;
  CU(cuModuleLoad(&other, kernel_file("sample_kernels.ptx").c_str()));
  CU(cuModuleGetFunction(&stale, other, "spin"));
  CU(cuModuleUnload(other));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuLaunchKernel(stale, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr))
      << "a function of an unloaded module";
  // The largest valid shapes are accepted.
  EXPECT_CU(CUDA_SUCCESS, launch(2147483647u, 65535, 65535, 1024, 1, 1, 0));
  EXPECT_CU(CUDA_SUCCESS, launch(1, 1, 1, 16, 1, 64, 48 * 1024));
  CU(cuCtxSynchronize());
}

TEST_F(SimKernels, LaunchExCooperativeAndPerThreadStreamVariants) {
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  unsigned long long ns = 5 * kMs;
  void* args[] = {&ns};
  CUlaunchAttribute coop{};
  coop.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  coop.value.cooperative = 1;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = config.blockDimY = config.blockDimZ = 1;
  config.hStream = s;
  auto timed = [&](const char* what, const std::function<CUresult()>& launch, const std::function<CUresult()>& sync) {
    const auto t0 = Clock::now();
    EXPECT_CU(CUDA_SUCCESS, launch()) << what;
    EXPECT_CU(CUDA_SUCCESS, sync()) << what;
    EXPECT_GE(ms_since(t0), 5.0) << what;
  };
  auto sync_s = [&] { return cuStreamSynchronize(s); };
  auto sync_pt = [] { return cuStreamSynchronize_ptsz(nullptr); };
  timed(
      "cuLaunchKernelEx", [&] { return cuLaunchKernelEx(&config, spin_, args, nullptr); }, sync_s);
  config.attrs = &coop;
  config.numAttrs = 1;
  timed(
      "cuLaunchKernelEx cooperative", [&] { return cuLaunchKernelEx(&config, spin_, args, nullptr); }, sync_s);
  timed(
      "cuLaunchCooperativeKernel", [&] { return cuLaunchCooperativeKernel(spin_, 1, 1, 1, 1, 1, 1, 0, s, args); },
      sync_s);
  timed(
      "cuLaunchKernel_ptsz", [&] { return cuLaunchKernel_ptsz(spin_, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr); },
      sync_pt);
  config.hStream = nullptr;  // the per-thread default stream, for the _ptsz variant
  timed(
      "cuLaunchKernelEx_ptsz", [&] { return cuLaunchKernelEx_ptsz(&config, spin_, args, nullptr); }, sync_pt);
  timed(
      "cuLaunchCooperativeKernel_ptsz",
      [&] { return cuLaunchCooperativeKernel_ptsz(spin_, 1, 1, 1, 1, 1, 1, 0, nullptr, args); }, sync_pt);
  timed(
      "cuLaunchKernel on CU_STREAM_PER_THREAD",
      [&] { return cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, CU_STREAM_PER_THREAD, args, nullptr); }, sync_pt);
  // The per-thread stream is busy while its kernel runs, then idle.
  CU(cuLaunchKernel_ptsz(spin_, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuStreamQuery_ptsz(nullptr));
  CU(cuStreamSynchronize(CU_STREAM_PER_THREAD));
  EXPECT_CU(CUDA_SUCCESS, cuStreamQuery_ptsz(nullptr));
  CU(cuStreamDestroy(s));
}

struct HostCalls {
  std::atomic<int> next{0};
  int order[4] = {-1, -1, -1, -1};
  Clock::time_point at[4];
};

void record_host_call(void* data) {
  auto* calls = static_cast<HostCalls*>(data);
  const int i = calls->next.fetch_add(1);
  if (i < 4) {
    calls->order[i] = i;
    calls->at[i] = Clock::now();
  }
}

TEST_F(SimKernels, StreamOrderAndQuery) {
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, 0));
  HostCalls calls;
  CU(cuStreamQuery(s));
  const auto t0 = Clock::now();
  CU(launch_spin(spin_, 30 * kMs, s));
  CU(cuLaunchHostFunc(s, record_host_call, &calls));
  CU(cuLaunchHostFunc(s, record_host_call, &calls));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(s)) << "busy with a 30 ms kernel";
  CU(cuStreamSynchronize(s));
  EXPECT_CU(CUDA_SUCCESS, cuStreamQuery(s));
  ASSERT_EQ(2, calls.next.load());
  EXPECT_GE(ms_between(t0, calls.at[0]), 30.0) << "a host function enqueued after a kernel runs after it";
  EXPECT_LE(calls.at[0], calls.at[1]);

  // Legacy NULL stream: work on it waits for earlier work on blocking streams.
  HostCalls legacy;
  const auto t1 = Clock::now();
  CU(launch_spin(spin_, 20 * kMs, s));
  CU(cuLaunchHostFunc(nullptr, record_host_call, &legacy));
  CU(cuStreamSynchronize(nullptr));
  ASSERT_EQ(1, legacy.next.load());
  EXPECT_GE(ms_between(t1, legacy.at[0]), 20.0);
  CU(cuStreamDestroy(s));
}

TEST_F(SimKernels, StreamWaitEventOrdersWorkAcrossStreams) {
  CUstream producer = nullptr, consumer = nullptr;
  CU(cuStreamCreate(&producer, CU_STREAM_NON_BLOCKING));
  CU(cuStreamCreate(&consumer, CU_STREAM_NON_BLOCKING));
  CUevent done = nullptr, never = nullptr;
  CU(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
  CU(cuEventCreate(&never, CU_EVENT_DISABLE_TIMING));
  CU(cuStreamWaitEvent(consumer, never, 0));  // an event never recorded is already complete
  HostCalls calls;
  const auto t0 = Clock::now();
  CU(launch_spin(spin_, 30 * kMs, producer));
  CU(cuEventRecord(done, producer));
  CU(cuStreamWaitEvent(consumer, done, 0));
  CU(cuLaunchHostFunc(consumer, record_host_call, &calls));
  EXPECT_CU(CUDA_ERROR_NOT_READY, cuStreamQuery(consumer));
  CU(cuStreamSynchronize(consumer));
  ASSERT_EQ(1, calls.next.load());
  EXPECT_GE(ms_between(t0, calls.at[0]), 30.0);
  EXPECT_CU(CUDA_SUCCESS, cuEventQuery(done));
  EXPECT_CU(CUDA_SUCCESS, cuStreamQuery(producer));
  CU(cuEventDestroy(done));
  CU(cuEventDestroy(never));
  CU(cuStreamDestroy(producer));
  CU(cuStreamDestroy(consumer));
}

// ---------------------------------------------------------------------------------------------
// Graphs
// ---------------------------------------------------------------------------------------------

TEST_F(Sim, HandlesOfTheWrongKindAreRefusedNotReinterpreted) {
  CUstream stream;
  CUevent event;
  CU(cuStreamCreate(&stream, 0));
  CU(cuEventCreate(&event, 0));
  // An event passed as a stream, a stream as an event, a context as a module: refused, never used.
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuStreamSynchronize(reinterpret_cast<CUstream>(event)));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuEventRecord(reinterpret_cast<CUevent>(stream), nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuEventQuery(reinterpret_cast<CUevent>(stream)));
  CUcontext ctx;
  CU(cuCtxGetCurrent(&ctx));
  CUfunction f;
  EXPECT_CU(CUDA_ERROR_INVALID_HANDLE, cuModuleGetFunction(&f, reinterpret_cast<CUmodule>(ctx), "spin"));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuCtxPushCurrent(reinterpret_cast<CUcontext>(stream)));
  CU(cuEventDestroy(event));
  CU(cuStreamDestroy(stream));
}

TEST_F(SimKernels, CapturedGraphOfSpinKernels) {
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  unsigned long long ns = 2 * kMs;
  void* args[] = {&ns};
  const auto c0 = Clock::now();
  CU(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CU(cuStreamIsCapturing(s, &status));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_ACTIVE, status);
  for (int i = 0; i < 5; ++i) CU(cuLaunchKernel(spin_, 1, 1, 1, 1, 1, 1, 0, s, args, nullptr));
  CUgraph graph = nullptr;
  CU(cuStreamEndCapture(s, &graph));
  EXPECT_LT(ms_since(c0), 10.0) << "captured work does not run";
  CU(cuStreamIsCapturing(s, &status));
  EXPECT_EQ(CU_STREAM_CAPTURE_STATUS_NONE, status);
  std::size_t nodes = 0;
  CU(cuGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(5u, nodes);

  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  CUevent e0 = nullptr, e1 = nullptr;
  CU(cuEventCreate(&e0, CU_EVENT_DEFAULT));
  CU(cuEventCreate(&e1, CU_EVENT_DEFAULT));
  const auto t0 = Clock::now();
  CU(cuEventRecord(e0, s));
  CU(cuGraphLaunch(exec, s));
  CU(cuGraphLaunch(exec, s));
  CU(cuEventRecord(e1, s));
  CU(cuStreamSynchronize(s));
  EXPECT_GE(ms_since(t0), 20.0) << "two launches of five 2 ms kernels";
  // Device time between the events: at least the kernels'. (No upper bound: the simulator counts a
  // late wake-up between two queued kernels as device idle time, so under CPU load a train of short
  // kernels stretches; a single long kernel, as in SpinKernelTakesItsTime..., does not.)
  EXPECT_GE(elapsed_ms(e0, e1), 19.8);

  EXPECT_CU(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, cuStreamBeginCapture(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL))
      << "the legacy NULL stream cannot be captured";
  CU(cuEventDestroy(e0));
  CU(cuEventDestroy(e1));
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  CU(cuStreamDestroy(s));
}

TEST_F(SimKernels, HandBuiltGraphAndPerThreadGraphLaunch) {
  CUgraph graph = nullptr;
  CU(cuGraphCreate(&graph, 0));
  unsigned long long ns = 3 * kMs;
  void* args[] = {&ns};
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = spin_;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  CUgraphNode a = nullptr, b = nullptr, c = nullptr;
  CU(cuGraphAddKernelNode(&a, graph, nullptr, 0, &p));
  ns = 4 * kMs;  // parameters are copied when the node is added
  CU(cuGraphAddKernelNode(&b, graph, &a, 1, &p));
  CUDA_KERNEL_NODE_PARAMS q = p;
  q.func = noop_;
  q.kernelParams = nullptr;
  CU(cuGraphAddKernelNode(&c, graph, &b, 1, &q));
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CU(cuGraphNodeGetType(b, &type));
  EXPECT_EQ(CU_GRAPH_NODE_TYPE_KERNEL, type);
  CUgraphNode bad = nullptr;
  CUDA_KERNEL_NODE_PARAMS zero_block = p;
  zero_block.blockDimX = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddKernelNode(&bad, graph, nullptr, 0, &zero_block));

  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  auto t0 = Clock::now();
  CU(cuGraphLaunch(exec, s));
  CU(cuStreamSynchronize(s));
  EXPECT_GE(ms_since(t0), 7.0) << "3 ms + 4 ms + 10 us";
  t0 = Clock::now();
  CU(cuGraphLaunch_ptsz(exec, nullptr));
  CU(cuStreamSynchronize_ptsz(nullptr));
  EXPECT_GE(ms_since(t0), 7.0) << "cuGraphLaunch_ptsz on the per-thread stream";
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  CU(cuStreamDestroy(s));
}

// ---------------------------------------------------------------------------------------------
// cuGetProcAddress and the export table
// ---------------------------------------------------------------------------------------------

void* sim_libcuda() {
  // The simulated libcuda.so.1 this test is linked with (already loaded: RTLD_NOLOAD).
  return dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
}

TEST_F(Sim, GetProcAddressAnswersEveryRecordedRuntimeLookup) {
  void* lib = sim_libcuda();
  ASSERT_NE(nullptr, lib) << dlerror();
  Dl_info info{};
  ASSERT_NE(0, dladdr(dlsym(lib, "cuInit"), &info));
  EXPECT_NE(nullptr, std::strstr(info.dli_fname, "simgpu")) << "not the simulated driver: " << info.dli_fname;

  const std::string path = SLICE_TEST_DATA_DIR "/cudart13-procaddr-lookups.tsv";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;
  int rows = 0, found = 0, line_no = 0;
  bool header = false;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    if (!header) {
      header = true;  // "symbol cudaVersion flags export"
      continue;
    }
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string col; std::getline(ss, col, '\t');) cols.push_back(col);
    ASSERT_EQ(4u, cols.size()) << path << ":" << line_no;
    const std::string& symbol = cols[0];
    const int version = std::stoi(cols[1]);
    const cuuint64_t flags = std::stoull(cols[2]);
    const std::string& expected = cols[3];
    const std::string where = path + ":" + std::to_string(line_no) + ": " + symbol + " " + cols[1] + " " + cols[2];
    void* pfn = reinterpret_cast<void*>(1);
    CUdriverProcAddressQueryResult status = static_cast<CUdriverProcAddressQueryResult>(99);
    const CUresult r = cuGetProcAddress(symbol.c_str(), &pfn, version, flags, &status);
    ++rows;
    if (expected == "NOT FOUND") {
      EXPECT_EQ(CUDA_SUCCESS, r) << where << ": the real driver answers no error, a NULL pointer and the status";
      EXPECT_EQ(nullptr, pfn) << where;
      // A symbol the driver has at a later version is VERSION_NOT_SUFFICIENT, any other SYMBOL_NOT_FOUND.
      void* later = nullptr;
      const bool exists = cuGetProcAddress(symbol.c_str(), &later, 13000, flags, nullptr) == CUDA_SUCCESS && later;
      EXPECT_EQ(exists ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, status)
          << where;
      continue;
    }
    ++found;
    void* exported = dlsym(lib, expected.c_str());
    EXPECT_NE(nullptr, exported) << where << ": the simulator does not export " << expected;
    EXPECT_EQ(CUDA_SUCCESS, r) << where;
    EXPECT_EQ(CU_GET_PROC_ADDRESS_SUCCESS, status) << where;
    EXPECT_EQ(exported, pfn) << where << ": not the address of " << expected;
  }
  std::cout << "[          ] checked " << rows << " recorded look-ups, " << found << " found\n";
  EXPECT_GE(rows, 400);
  dlclose(lib);
}

TEST_F(Sim, GetProcAddressStatusesAndErrors) {
  void* lib = sim_libcuda();
  ASSERT_NE(nullptr, lib);
  void* pfn = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  // What the real driver (580.159.04) answered, tests/gpu/procaddr_real.cpp: no error, a NULL pointer
  // and the status, both for a symbol asked for at a version before it was introduced
  // (cuMemAllocAsync: 11.2) and for a name no driver has.
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuMemAllocAsync", &pfn, 11000, 0, &status));
  EXPECT_EQ(CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT, status);
  EXPECT_EQ(nullptr, pfn);
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuMemAllocAsync", &pfn, 11020, 0, &status));
  EXPECT_EQ(CU_GET_PROC_ADDRESS_SUCCESS, status);
  EXPECT_EQ(dlsym(lib, "cuMemAllocAsync"), pfn);
  pfn = reinterpret_cast<void*>(1);
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuNoSuchFunction", &pfn, 13000, 0, &status));
  EXPECT_EQ(CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND, status);
  EXPECT_EQ(nullptr, pfn);
  pfn = reinterpret_cast<void*>(1);
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuNoSuchFunction", &pfn, 13000, 0, nullptr)) << "symbolStatus is optional";
  EXPECT_EQ(nullptr, pfn);
  // Per-thread default stream variants, and the ABI chosen by version.
  EXPECT_CU(CUDA_SUCCESS,
            cuGetProcAddress("cuLaunchKernel", &pfn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  EXPECT_EQ(dlsym(lib, "cuLaunchKernel_ptsz"), pfn);
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuMemAlloc", &pfn, 3020, 0, &status));
  EXPECT_EQ(dlsym(lib, "cuMemAlloc_v2"), pfn);
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuCtxCreate", &pfn, 12050, 0, &status));
  EXPECT_EQ(dlsym(lib, "cuCtxCreate_v4"), pfn);
  // The graphics interop functions, which the real driver finds too (cudaGLTypedefs.h and the like):
  // exported, and answering CUDA_ERROR_NOT_SUPPORTED, as every function the simulator does not model.
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuGLMapBufferObject", &pfn, 7000,
                                           CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &status));
  ASSERT_NE(nullptr, dlsym(lib, "cuGLMapBufferObject_v2_ptds"));
  EXPECT_EQ(dlsym(lib, "cuGLMapBufferObject_v2_ptds"), pfn);
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuVDPAUCtxCreate", &pfn, 3020, 0, &status));
  ASSERT_NE(nullptr, pfn);
  EXPECT_EQ(dlsym(lib, "cuVDPAUCtxCreate_v2"), pfn);
  EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, reinterpret_cast<CUresult (*)()>(pfn)());
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuEGLStreamConsumerConnect", &pfn, 13000, 0, &status));
  EXPECT_EQ(dlsym(lib, "cuEGLStreamConsumerConnect"), pfn);
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuWGLGetDevice", &pfn, 13000, 0, &status));
  EXPECT_EQ(nullptr, pfn) << "Windows only";
  // A CUDA version above the driver's (13.0) is an error (cuGetProcAddress's documentation).
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress("cuInit", &pfn, 13010, 0, &status));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress(nullptr, &pfn, 13000, 0, &status));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGetProcAddress("cuInit", nullptr, 13000, 0, &status));

  // The 11.3 ABI of cuGetProcAddress, as the runtime asks for it, works too.
  using GetProcAddressV1 = CUresult (*)(const char*, void**, int, cuuint64_t);
  void* v1 = nullptr;
  EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress("cuGetProcAddress", &v1, 11030, 0, &status));
  ASSERT_EQ(dlsym(lib, "cuGetProcAddress"), v1);
  EXPECT_CU(CUDA_SUCCESS, reinterpret_cast<GetProcAddressV1>(v1)("cuMemFree", &pfn, 3020, 0));
  EXPECT_EQ(dlsym(lib, "cuMemFree_v2"), pfn);
  dlclose(lib);
}

// The weak, default-visibility cu* functions in the simulated libcuda's dynamic symbol table: the
// stubs (tools/simgpu/export_stubs.cpp) for the real driver's exports the simulator leaves out.
std::vector<std::string> weak_driver_exports(const std::string& file) {
  std::vector<std::string> names;
  const int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return names;
  struct stat st {};
  fstat(fd, &st);
  void* map = mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return names;
  const auto* base = static_cast<const unsigned char*>(map);
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_DYNSYM) continue;
    const auto* syms = reinterpret_cast<const Elf64_Sym*>(base + sh[i].sh_offset);
    const char* strings = reinterpret_cast<const char*>(base + sh[sh[i].sh_link].sh_offset);
    for (std::size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
      const std::string name = strings + syms[k].st_name;
      if (ELF64_ST_BIND(syms[k].st_info) == STB_WEAK && ELF64_ST_TYPE(syms[k].st_info) == STT_FUNC &&
          syms[k].st_shndx != SHN_UNDEF && name.rfind("cu", 0) == 0)
        names.push_back(name);
    }
  }
  munmap(map, static_cast<std::size_t>(st.st_size));
  return names;
}

TEST_F(Sim, UnimplementedExportsAnswerNotSupported) {
  void* lib = sim_libcuda();
  ASSERT_NE(nullptr, lib);
  Dl_info info{};
  ASSERT_NE(0, dladdr(dlsym(lib, "cuInit"), &info));
  const std::vector<std::string> stubs = weak_driver_exports(info.dli_fname);
  ASSERT_FALSE(stubs.empty()) << "no weak stubs found in " << info.dli_fname;
  ASSERT_NE(stubs.end(), std::find(stubs.begin(), stubs.end(), "cuGetExportTable"))
      << "cuGetExportTable is implemented now: pick another unimplemented export for this test";
  const void* table = nullptr;
  CUuuid id{};
  EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, cuGetExportTable(&table, &id));
  // Every stub ignores its arguments, so each can be called without any.
  for (const std::string& name : stubs) {
    auto* fn = reinterpret_cast<CUresult (*)()>(dlsym(lib, name.c_str()));
    ASSERT_NE(nullptr, fn) << name;
    EXPECT_CU(CUDA_ERROR_NOT_SUPPORTED, fn()) << name;
  }
  std::cout << "[          ] " << stubs.size() << " unimplemented exports answer CUDA_ERROR_NOT_SUPPORTED\n";
  dlclose(lib);
}

TEST(Errors, NamesAndStrings) {
  const char* s = nullptr;
  EXPECT_CU(CUDA_SUCCESS, cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s));
  EXPECT_STREQ("CUDA_ERROR_OUT_OF_MEMORY", s);
  EXPECT_CU(CUDA_SUCCESS, cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s));
  EXPECT_STREQ("out of memory", s);
  const std::pair<CUresult, const char*> strings[] = {
      {CUDA_SUCCESS, "no error"},
      {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
      {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
      {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
      {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
      {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
      {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
      {CUDA_ERROR_NOT_READY, "device not ready"},
      {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
      {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
      {CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"},
  };
  for (const auto& [code, text] : strings) {
    EXPECT_CU(CUDA_SUCCESS, cuGetErrorString(code, &s));
    EXPECT_STREQ(text, s) << ::testing::PrintToString(code);
  }
  EXPECT_CU(CUDA_SUCCESS, cuGetErrorName(CUDA_SUCCESS, &s));
  EXPECT_STREQ("CUDA_SUCCESS", s);
  EXPECT_CU(CUDA_SUCCESS, cuGetErrorName(CUDA_ERROR_CONTEXT_IS_DESTROYED, &s));
  EXPECT_STREQ("CUDA_ERROR_CONTEXT_IS_DESTROYED", s);
  s = "untouched";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGetErrorName(static_cast<CUresult>(12345), &s));
  EXPECT_EQ(nullptr, s);
  s = "untouched";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGetErrorString(static_cast<CUresult>(12345), &s));
  EXPECT_EQ(nullptr, s);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, nullptr));
}

// ---------------------------------------------------------------------------------------------
// NVML
// ---------------------------------------------------------------------------------------------

class Nvml : public SimKernels {
 protected:
  void SetUp() override {
    unsigned n = 0;
    EXPECT_NVML(NVML_ERROR_UNINITIALIZED, nvmlDeviceGetCount_v2(&n)) << "before nvmlInit";
    NVML(nvmlInit_v2());
    initialized_ = true;
    NVML(nvmlDeviceGetHandleByIndex_v2(0, &nvml_dev_));
    SimKernels::SetUp();
  }
  void TearDown() override {
    SimKernels::TearDown();
    if (initialized_) {
      EXPECT_NVML(NVML_SUCCESS, nvmlShutdown());
    }
  }
  bool initialized_ = false;
  nvmlDevice_t nvml_dev_ = nullptr;
};

TEST_F(Nvml, DevicesMatchTheDriver) {
  unsigned n = 0;
  NVML(nvmlDeviceGetCount_v2(&n));
  EXPECT_EQ(1u, n);
  nvmlDevice_t none = nullptr;
  EXPECT_NVML(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByIndex_v2(1, &none));

  char cu_name[256] = {}, nv_name[96] = {};
  CU(cuDeviceGetName(cu_name, sizeof cu_name, dev_));
  NVML(nvmlDeviceGetName(nvml_dev_, nv_name, sizeof nv_name));
  EXPECT_STREQ(cu_name, nv_name);

  CUuuid uuid{};
  CU(cuDeviceGetUuid(&uuid, dev_));
  char nv_uuid[96] = {};
  NVML(nvmlDeviceGetUUID(nvml_dev_, nv_uuid, sizeof nv_uuid));
  EXPECT_EQ(uuid_text(uuid), nv_uuid) << "NVML's UUID is the driver's, as GPU-xxxxxxxx-...";
  nvmlDevice_t by_uuid = nullptr;
  NVML(nvmlDeviceGetHandleByUUID(nv_uuid, &by_uuid));
  EXPECT_EQ(nvml_dev_, by_uuid);
  EXPECT_NVML(NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &by_uuid));

  char bus[13] = {};
  CU(cuDeviceGetPCIBusId(bus, sizeof bus, dev_));
  nvmlDevice_t by_bus = nullptr;
  NVML(nvmlDeviceGetHandleByPciBusId_v2(bus, &by_bus));
  EXPECT_EQ(nvml_dev_, by_bus);
  nvmlPciInfo_t pci{};
  NVML(nvmlDeviceGetPciInfo_v3(nvml_dev_, &pci));
  EXPECT_EQ(16u, std::strlen(pci.busId)) << "NVML's bus id has an 8-digit domain: " << pci.busId;
  EXPECT_STRCASEEQ(bus, pci.busIdLegacy) << "NVML's legacy bus id is the driver's";
  NVML(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &by_bus));
  EXPECT_EQ(nvml_dev_, by_bus);
  int busno = -1;
  CU(cuDeviceGetAttribute(&busno, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev_));
  EXPECT_EQ(static_cast<unsigned>(busno), pci.bus);
}

TEST_F(Nvml, MemoryAndProcessesMatchTheDriver) {
  std::size_t f = 0, t = 0;
  CU(cuMemGetInfo(&f, &t));
  const std::size_t before = t - f;  // the sample kernels' module globals (a 2 MiB chunk)
  EXPECT_EQ(2 * MiB, before);
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, 256 * MiB + 100));
  CU(cuMemGetInfo(&f, &t));
  EXPECT_EQ(256 * MiB + 512, t - f - before);

  nvmlMemory_t v1{};
  NVML(nvmlDeviceGetMemoryInfo(nvml_dev_, &v1));
  EXPECT_EQ(t, v1.total);
  EXPECT_EQ(f, v1.free);
  EXPECT_EQ(t - f, v1.used);
  nvmlMemory_v2_t v2{};
  v2.version = nvmlMemory_v2;
  NVML(nvmlDeviceGetMemoryInfo_v2(nvml_dev_, &v2));
  EXPECT_EQ(t, v2.total);
  EXPECT_EQ(f, v2.free);
  EXPECT_EQ(t - f, v2.used + v2.reserved);
  EXPECT_EQ(v1.used, v2.used + v2.reserved);
  nvmlMemory_v2_t wrong{};
  wrong.version = 1;
  EXPECT_NVML(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, nvmlDeviceGetMemoryInfo_v2(nvml_dev_, &wrong));

  // This process, with exactly its memory.
  unsigned count = 0;
  EXPECT_NVML(NVML_ERROR_INSUFFICIENT_SIZE, nvmlDeviceGetComputeRunningProcesses_v3(nvml_dev_, &count, nullptr));
  ASSERT_GE(count, 1u);
  std::vector<nvmlProcessInfo_t> infos(count + 4);
  count = static_cast<unsigned>(infos.size());
  NVML(nvmlDeviceGetComputeRunningProcesses_v3(nvml_dev_, &count, infos.data()));
  const auto me = std::find_if(infos.begin(), infos.begin() + count,
                               [](const nvmlProcessInfo_t& i) { return i.pid == static_cast<unsigned>(getpid()); });
  ASSERT_NE(infos.begin() + count, me) << "this process is not listed";
  EXPECT_EQ(t - f, me->usedGpuMemory);
  EXPECT_EQ(0xFFFFFFFFu, me->gpuInstanceId);
  EXPECT_EQ(0xFFFFFFFFu, me->computeInstanceId);
  CU(cuMemFree(p));
}

TEST_F(Nvml, UtilizationFollowsDeviceBusyTime) {
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  for (int i = 0; i < 30; ++i) CU(launch_spin(spin_, 10 * kMs, s));  // 300 ms of device time
  CU(cuStreamSynchronize(s));
  // Utilization is read from whole 100 ms buckets of the last second: let the current one close.
  std::this_thread::sleep_for(110ms);
  nvmlUtilization_t u{};
  NVML(nvmlDeviceGetUtilizationRates(nvml_dev_, &u));
  EXPECT_GE(u.gpu, 25u) << "300 ms busy in the last second";
  EXPECT_LE(u.gpu, 100u);
  CU(cuStreamDestroy(s));
}

// NVML with the driver's primary context, without the sample kernels (so these run where nvcc is not).
class NvmlQueries : public Sim {
 protected:
  void SetUp() override {
    Sim::SetUp();
    if (HasFatalFailure()) return;
    NVML(nvmlInit_v2());
    initialized_ = true;
    NVML(nvmlDeviceGetHandleByIndex_v2(0, &nvml_dev_));
  }
  void TearDown() override {
    if (initialized_) {
      EXPECT_NVML(NVML_SUCCESS, nvmlShutdown());
    }
    Sim::TearDown();
  }
  bool initialized_ = false;
  nvmlDevice_t nvml_dev_ = nullptr;
};

// What monitoring tools (nvitop, nvidia-ml-py) look up by name: a real driver exports all of it, and
// a missing one is a FunctionNotFound traceback in the tool rather than an N/A.
TEST_F(NvmlQueries, ExportsWhatMonitoringToolsLookUp) {
  for (const char* name : {"nvmlDeviceGetCount",
                           "nvmlDeviceGetCount_v2",
                           "nvmlDeviceGetHandleByIndex",
                           "nvmlDeviceGetHandleByIndex_v2",
                           "nvmlDeviceGetHandleByUUID",
                           "nvmlDeviceGetHandleByUUIDV",
                           "nvmlDeviceGetHandleByPciBusId_v2",
                           "nvmlDeviceGetHandleBySerial",
                           "nvmlDeviceGetClockInfo",
                           "nvmlDeviceGetMaxClockInfo",
                           "nvmlDeviceGetComputeMode",
                           "nvmlDeviceGetPerformanceState",
                           "nvmlDeviceGetPersistenceMode",
                           "nvmlDeviceGetEncoderUtilization",
                           "nvmlDeviceGetDecoderUtilization",
                           "nvmlDeviceGetDisplayActive",
                           "nvmlDeviceGetDisplayMode",
                           "nvmlDeviceGetDriverModel",
                           "nvmlDeviceGetDriverModel_v2",
                           "nvmlDeviceGetFanSpeed",
                           "nvmlDeviceGetTemperature",
                           "nvmlDeviceGetTemperatureV",
                           "nvmlDeviceGetPowerUsage",
                           "nvmlDeviceGetPowerManagementLimit",
                           "nvmlDeviceGetTotalEccErrors",
                           "nvmlDeviceGetBAR1MemoryInfo",
                           "nvmlDeviceGetPcieThroughput",
                           "nvmlDeviceGetMigMode",
                           "nvmlDeviceIsMigDeviceHandle",
                           "nvmlDeviceGetMaxMigDeviceCount",
                           "nvmlDeviceGetFieldValues",
                           "nvmlDeviceGetSerial",
                           "nvmlDeviceGetGraphicsRunningProcesses",
                           "nvmlDeviceGetMPSComputeRunningProcesses_v2",
                           "nvmlDeviceGetRunningProcessDetailList",
                           "nvmlDeviceGetConfComputeMemSizeInfo"}) {
    EXPECT_NE(nullptr, dlsym(RTLD_DEFAULT, name)) << name << " is not exported";
  }
}

// Modes and clocks of a headless Linux GPU, the clocks and compute mode as the driver reports them.
TEST_F(NvmlQueries, ModesAndClocksAreTheSimulatedCards) {
  nvmlEnableState_t state = NVML_FEATURE_ENABLED;
  NVML(nvmlDeviceGetPersistenceMode(nvml_dev_, &state));
  EXPECT_EQ(NVML_FEATURE_DISABLED, state);
  state = NVML_FEATURE_ENABLED;
  NVML(nvmlDeviceGetDisplayActive(nvml_dev_, &state));
  EXPECT_EQ(NVML_FEATURE_DISABLED, state);
  nvmlPstates_t pstate = NVML_PSTATE_UNKNOWN;
  NVML(nvmlDeviceGetPerformanceState(nvml_dev_, &pstate));
  EXPECT_EQ(NVML_PSTATE_0, pstate);
  int cu_mode = -1;
  CU(cuDeviceGetAttribute(&cu_mode, CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, dev_));
  nvmlComputeMode_t mode = NVML_COMPUTEMODE_PROHIBITED;
  NVML(nvmlDeviceGetComputeMode(nvml_dev_, &mode));
  EXPECT_EQ(NVML_COMPUTEMODE_DEFAULT, mode);
  EXPECT_EQ(cu_mode, static_cast<int>(mode));

  int sm_khz = 0, mem_khz = 0;
  CU(cuDeviceGetAttribute(&sm_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev_));
  CU(cuDeviceGetAttribute(&mem_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev_));
  unsigned mhz = 0, max_mhz = 0;
  NVML(nvmlDeviceGetClockInfo(nvml_dev_, NVML_CLOCK_SM, &mhz));
  NVML(nvmlDeviceGetMaxClockInfo(nvml_dev_, NVML_CLOCK_SM, &max_mhz));
  EXPECT_EQ(static_cast<unsigned>(sm_khz / 1000), mhz);
  EXPECT_EQ(mhz, max_mhz) << "in P0 the clocks are the maximum ones";
  NVML(nvmlDeviceGetClockInfo(nvml_dev_, NVML_CLOCK_MEM, &mhz));
  EXPECT_EQ(static_cast<unsigned>(mem_khz / 1000), mhz);
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetClockInfo(nvml_dev_, NVML_CLOCK_VIDEO, &mhz));
  EXPECT_NVML(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetClockInfo(nvml_dev_, NVML_CLOCK_COUNT, &mhz));

  nvmlDriverModel_t current = NVML_DRIVER_WDDM, pending = NVML_DRIVER_WDDM;
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetDriverModel_v2(nvml_dev_, &current, &pending)) << "Windows only";
  unsigned is_mig = 1, mig_current = 0, mig_pending = 0;
  NVML(nvmlDeviceIsMigDeviceHandle(nvml_dev_, &is_mig));
  EXPECT_EQ(0u, is_mig);
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetMigMode(nvml_dev_, &mig_current, &mig_pending));
}

// Sensors, power, ECC, BAR1, PCIe and video engines are not simulated: NOT_SUPPORTED, as on a GPU
// without them, which tools show as N/A.
TEST_F(NvmlQueries, UnmodelledQueriesAreNotSupported) {
  unsigned u = 0, period = 0;
  unsigned long long ull = 0;
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetTemperature(nvml_dev_, NVML_TEMPERATURE_GPU, &u));
  EXPECT_NVML(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetTemperature(nvml_dev_, NVML_TEMPERATURE_COUNT, &u));
  nvmlTemperature_v1_t t{};
  t.version = nvmlTemperature_v1;
  t.sensorType = NVML_TEMPERATURE_GPU;
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetTemperatureV(nvml_dev_, &t));
  t.version = 1;
  EXPECT_NVML(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, nvmlDeviceGetTemperatureV(nvml_dev_, &t));
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetFanSpeed(nvml_dev_, &u));
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetPowerUsage(nvml_dev_, &u));
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetPowerManagementLimit(nvml_dev_, &u));
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED,
              nvmlDeviceGetTotalEccErrors(nvml_dev_, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &ull));
  int ecc = -1;
  CU(cuDeviceGetAttribute(&ecc, CU_DEVICE_ATTRIBUTE_ECC_ENABLED, dev_));
  EXPECT_EQ(0, ecc) << "the driver agrees: no ECC";
  nvmlBAR1Memory_t bar1{};
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetBAR1MemoryInfo(nvml_dev_, &bar1));
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetPcieThroughput(nvml_dev_, NVML_PCIE_UTIL_TX_BYTES, &u));
  EXPECT_NVML(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetPcieThroughput(nvml_dev_, NVML_PCIE_UTIL_COUNT, &u));
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetEncoderUtilization(nvml_dev_, &u, &period));
  EXPECT_NVML(NVML_ERROR_NOT_SUPPORTED, nvmlDeviceGetDecoderUtilization(nvml_dev_, &u, &period));

  // Field values: the call succeeds and each field reports its own NOT_SUPPORTED.
  nvmlFieldValue_t fields[3] = {};
  fields[0].fieldId = 1;
  fields[1].fieldId = 2;
  fields[2].nvmlReturn = NVML_ERROR_UNKNOWN;  // past the count: untouched
  NVML(nvmlDeviceGetFieldValues(nvml_dev_, 2, fields));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(NVML_ERROR_NOT_SUPPORTED, fields[i].nvmlReturn) << "field " << i;
    EXPECT_GT(fields[i].timestamp, 0) << "field " << i;
  }
  EXPECT_EQ(1u, fields[0].fieldId);
  EXPECT_EQ(NVML_ERROR_UNKNOWN, fields[2].nvmlReturn);
  EXPECT_NVML(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetFieldValues(nvml_dev_, 1, nullptr));
}

// The documented argument checks, before any answer: NULL results and handles that are no device
// are INVALID_ARGUMENT, and nothing answers before nvmlInit.
TEST_F(NvmlQueries, UnmodelledQueriesCheckTheirArguments) {
  using Call = std::function<nvmlReturn_t(nvmlDevice_t, void*)>;
  const std::vector<std::pair<const char*, Call>> queries = {
      {"nvmlDeviceGetPersistenceMode",
       [](nvmlDevice_t d, void* p) { return nvmlDeviceGetPersistenceMode(d, static_cast<nvmlEnableState_t*>(p)); }},
      {"nvmlDeviceGetDisplayMode",
       [](nvmlDevice_t d, void* p) { return nvmlDeviceGetDisplayMode(d, static_cast<nvmlEnableState_t*>(p)); }},
      {"nvmlDeviceGetComputeMode",
       [](nvmlDevice_t d, void* p) { return nvmlDeviceGetComputeMode(d, static_cast<nvmlComputeMode_t*>(p)); }},
      {"nvmlDeviceGetPerformanceState",
       [](nvmlDevice_t d, void* p) { return nvmlDeviceGetPerformanceState(d, static_cast<nvmlPstates_t*>(p)); }},
      {"nvmlDeviceGetClockInfo",
       [](nvmlDevice_t d, void* p) {
         return nvmlDeviceGetClockInfo(d, NVML_CLOCK_GRAPHICS, static_cast<unsigned*>(p));
       }},
      {"nvmlDeviceGetDriverModel_v2",
       [](nvmlDevice_t d, void* p) {
         return nvmlDeviceGetDriverModel_v2(d, static_cast<nvmlDriverModel_t*>(p), static_cast<nvmlDriverModel_t*>(p));
       }},
      {"nvmlDeviceGetTemperature",
       [](nvmlDevice_t d, void* p) {
         return nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, static_cast<unsigned*>(p));
       }},
      {"nvmlDeviceGetFanSpeed",
       [](nvmlDevice_t d, void* p) { return nvmlDeviceGetFanSpeed(d, static_cast<unsigned*>(p)); }},
      {"nvmlDeviceGetPowerUsage",
       [](nvmlDevice_t d, void* p) { return nvmlDeviceGetPowerUsage(d, static_cast<unsigned*>(p)); }},
      {"nvmlDeviceGetTotalEccErrors",
       [](nvmlDevice_t d, void* p) {
         return nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC,
                                            static_cast<unsigned long long*>(p));
       }},
      {"nvmlDeviceGetBAR1MemoryInfo",
       [](nvmlDevice_t d, void* p) { return nvmlDeviceGetBAR1MemoryInfo(d, static_cast<nvmlBAR1Memory_t*>(p)); }},
      {"nvmlDeviceGetEncoderUtilization",
       [](nvmlDevice_t d, void* p) {
         return nvmlDeviceGetEncoderUtilization(d, static_cast<unsigned*>(p), static_cast<unsigned*>(p));
       }},
      {"nvmlDeviceIsMigDeviceHandle",
       [](nvmlDevice_t d, void* p) { return nvmlDeviceIsMigDeviceHandle(d, static_cast<unsigned*>(p)); }},
  };
  alignas(8) unsigned char out[64] = {};
  int not_a_device = 0;
  const auto bogus = reinterpret_cast<nvmlDevice_t>(&not_a_device);
  for (const auto& [name, call] : queries) {
    const nvmlReturn_t r = call(nvml_dev_, out);
    EXPECT_TRUE(r == NVML_SUCCESS || r == NVML_ERROR_NOT_SUPPORTED) << name << ": " << r;
    EXPECT_EQ(NVML_ERROR_INVALID_ARGUMENT, call(nvml_dev_, nullptr)) << name << " with a NULL result";
    EXPECT_EQ(NVML_ERROR_INVALID_ARGUMENT, call(nullptr, out)) << name << " with a NULL device";
    EXPECT_EQ(NVML_ERROR_INVALID_ARGUMENT, call(bogus, out)) << name << " with a handle that is no device";
  }
  NVML(nvmlShutdown());
  initialized_ = false;
  for (const auto& [name, call] : queries) EXPECT_EQ(NVML_ERROR_UNINITIALIZED, call(nvml_dev_, out)) << name;
  NVML(nvmlInit_v2());
  initialized_ = true;
}

// nvmlDeviceGetHandleByUUIDV finds the device by the driver's UUID, as text and as bytes.
TEST_F(NvmlQueries, HandleByUuidVersionedFindsTheDevice) {
  CUuuid cu{};
  CU(cuDeviceGetUuid(&cu, dev_));
  nvmlUUID_t uuid{};
  uuid.version = nvmlUUID_v1;
  uuid.type = NVML_UUID_TYPE_ASCII;
  std::snprintf(uuid.value.str, sizeof uuid.value.str, "%s", uuid_text(cu).c_str());
  nvmlDevice_t found = nullptr;
  NVML(nvmlDeviceGetHandleByUUIDV(&uuid, &found));
  EXPECT_EQ(nvml_dev_, found);

  uuid = nvmlUUID_t{};
  uuid.version = nvmlUUID_v1;
  uuid.type = NVML_UUID_TYPE_BINARY;
  std::memcpy(uuid.value.bytes, cu.bytes, sizeof uuid.value.bytes);
  found = nullptr;
  NVML(nvmlDeviceGetHandleByUUIDV(&uuid, &found));
  EXPECT_EQ(nvml_dev_, found);
  uuid.value.bytes[0] ^= 0xFF;
  EXPECT_NVML(NVML_ERROR_NOT_FOUND, nvmlDeviceGetHandleByUUIDV(&uuid, &found));
  uuid.version = 1;
  EXPECT_NVML(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, nvmlDeviceGetHandleByUUIDV(&uuid, &found));
  EXPECT_NVML(NVML_ERROR_INVALID_ARGUMENT, nvmlDeviceGetHandleByUUIDV(nullptr, &found));
}

// The detail list of compute processes is the v3 list: this process with its memory, and no MIG.
TEST_F(NvmlQueries, RunningProcessDetailListListsThisProcess) {
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, 64 * MiB));
  std::size_t f = 0, t = 0;
  CU(cuMemGetInfo(&f, &t));
  nvmlProcessDetailList_t list{};
  list.version = nvmlProcessDetailList_v1;
  list.mode = NVML_PROCESS_MODE_COMPUTE;
  EXPECT_NVML(NVML_ERROR_INSUFFICIENT_SIZE, nvmlDeviceGetRunningProcessDetailList(nvml_dev_, &list));
  ASSERT_GE(list.numProcArrayEntries, 1u);
  std::vector<nvmlProcessDetail_v1_t> details(list.numProcArrayEntries + 4);
  list.numProcArrayEntries = static_cast<unsigned>(details.size());
  list.procArray = details.data();
  NVML(nvmlDeviceGetRunningProcessDetailList(nvml_dev_, &list));
  const auto end = details.begin() + list.numProcArrayEntries;
  const auto me = std::find_if(
      details.begin(), end, [](const nvmlProcessDetail_v1_t& d) { return d.pid == static_cast<unsigned>(getpid()); });
  ASSERT_NE(end, me) << "this process is not listed";
  EXPECT_EQ(t - f, me->usedGpuMemory);
  EXPECT_EQ(0xFFFFFFFFu, me->gpuInstanceId);
  EXPECT_EQ(0xFFFFFFFFu, me->computeInstanceId);
  EXPECT_EQ(0u, me->usedGpuCcProtectedMemory);

  list.mode = NVML_PROCESS_MODE_GRAPHICS;
  NVML(nvmlDeviceGetRunningProcessDetailList(nvml_dev_, &list));
  EXPECT_EQ(0u, list.numProcArrayEntries);
  list.version = 1;
  EXPECT_NVML(NVML_ERROR_ARGUMENT_VERSION_MISMATCH, nvmlDeviceGetRunningProcessDetailList(nvml_dev_, &list));
  CU(cuMemFree(p));
}

}  // namespace
