// Conformance of the simulated driver (tools/simgpu) with the real CUDA driver for CUDA IPC of
// device memory (cuIpcGetMemHandle, cuIpcOpenMemHandle_v2, cuIpcCloseMemHandle) and graph memory
// nodes with the devices' graph memory pools (cuGraphAddMemAllocNode, cuGraphAddMemFreeNode, their
// GetParams, cuDeviceGraphMemTrim, cuDeviceGet/SetGraphMemAttribute).
//
// Linked directly against the simulated libcuda.so.1 and libnvidia-ml.so.1, and run by
// tests/run_isolated.sh with a SIMGPU_STATE of its own (1 device of 24 GiB), so every memory figure
// is exact. IPC needs a second process on the same machine: a forked child (Sibling) that starts its
// driver afresh on the same SIMGPU_STATE, as another program would.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nvml_subset.h"  // NVML's types as the simulator declares them

extern "C" {
nvmlReturn_t nvmlInit_v2();
nvmlReturn_t nvmlShutdown();
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                     nvmlProcessInfo_t* infos);
}

void PrintTo(CUresult r, std::ostream* os) {
  const char* name = nullptr;
  cuGetErrorName(r, &name);
  *os << (name ? name : "unknown CUresult") << " (" << static_cast<int>(r) << ")";
}

#define EXPECT_CU(expected, call) EXPECT_EQ(expected, (call)) << #call << " "
#define ASSERT_CU(expected, call) ASSERT_EQ(expected, (call)) << #call << " "
#define CU(call) ASSERT_CU(CUDA_SUCCESS, call)

namespace {

using namespace std::chrono_literals;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t GiB = 1024 * MiB;
constexpr std::size_t kDeviceBytes = 24 * GiB;  // SIMGPU_MEMORY's default
constexpr std::size_t kChunk = 2 * MiB;         // what a graph memory pool grows by

std::size_t round_up_512(std::size_t v) { return (v + 511) / 512 * 512; }

std::size_t free_bytes() {
  std::size_t f = 0, t = 0;
  EXPECT_CU(CUDA_SUCCESS, cuMemGetInfo(&f, &t));
  return f;
}

// The device memory NVML lists for process `pid` (0 when it is not listed), as nvidia-smi shows it.
unsigned long long nvml_process_memory(unsigned pid) {
  nvmlDevice_t dev = nullptr;
  EXPECT_EQ(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &dev));
  std::vector<nvmlProcessInfo_t> infos(64);
  unsigned count = static_cast<unsigned>(infos.size());
  EXPECT_EQ(NVML_SUCCESS, nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos.data()));
  for (unsigned i = 0; i < count; ++i)
    if (infos[i].pid == pid) return infos[i].usedGpuMemory;
  return 0;
}

unsigned long long nvml_used() {
  nvmlDevice_t dev = nullptr;
  EXPECT_EQ(NVML_SUCCESS, nvmlDeviceGetHandleByIndex_v2(0, &dev));
  nvmlMemory_t m{};
  EXPECT_EQ(NVML_SUCCESS, nvmlDeviceGetMemoryInfo(dev, &m));
  return m.used;
}

// simgpu-stat --json: this process's memory_bytes on device 0 (-1 when it cannot be read).
long long simgpu_stat_process_memory(int pid) {
  const std::string cmd = std::string(SLICE_BUILD_DIR) + "/bin/simgpu-stat --json";
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  if (pclose(f) != 0) return -1;
  const std::string key = "{\"pid\":" + std::to_string(pid) + ",";
  const std::size_t at = out.find(key);
  if (at == std::string::npos) return -1;
  const std::size_t mem = out.find("\"memory_bytes\":", at);
  return mem == std::string::npos ? -1 : std::stoll(out.substr(mem + 15));
}

cuuint64_t graph_attr(CUgraphMem_attribute attr) {
  cuuint64_t v = ~0ull;
  EXPECT_CU(CUDA_SUCCESS, cuDeviceGetGraphMemAttribute(0, attr, &v));
  return v;
}

// Runs `body` in a forked child that uses the same simulated machine (SIMGPU_STATE) as this process,
// as a second program would: its driver starts afresh (cuInit, a context of its own). The child
// reports failures through GoogleTest and exits 1 if there were any; this waits for it.
void Sibling(const std::function<void()>& body) {
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0) << "fork";
  if (pid == 0) {
    alarm(60);  // a child that hangs dies, and the test fails, instead of waiting forever
    body();
    const bool failed = ::testing::Test::HasFailure();
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(failed ? 1 : 0);
  }
  int status = 0;
  ASSERT_EQ(pid, waitpid(pid, &status, 0));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child failed (wait status " << status << ")";
}

// The start of a sibling's body: the driver and a current primary context.
void start_driver(CUcontext* ctx) {
  ASSERT_CU(CUDA_SUCCESS, cuInit(0));
  ASSERT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRetain(ctx, 0));
  ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(*ctx));
}

bool same_handle(const CUipcMemHandle& a, const CUipcMemHandle& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class Sim : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_CU(CUDA_SUCCESS, cuInit(0));
    ASSERT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRetain(&ctx_, 0));
    retained_ = true;
    ASSERT_CU(CUDA_SUCCESS, cuCtxSetCurrent(ctx_));
    ASSERT_EQ(NVML_SUCCESS, nvmlInit_v2());
    nvml_ = true;
  }
  void TearDown() override {
    CUcontext c = nullptr;
    while (cuCtxPopCurrent(&c) == CUDA_SUCCESS) {
    }
    if (retained_) {
      EXPECT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRelease(0));
    }
    if (nvml_) {
      EXPECT_EQ(NVML_SUCCESS, nvmlShutdown());
    }
  }
  CUcontext ctx_ = nullptr;
  bool retained_ = false;
  bool nvml_ = false;
};

// ---------------------------------------------------------------------------------------------
// CUDA IPC
// ---------------------------------------------------------------------------------------------

TEST_F(Sim, IpcSharesDeviceMemoryWithAnotherProcess) {
  constexpr std::size_t bytes = 1 * MiB + 100;
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, bytes));
  std::vector<std::uint8_t> pattern(bytes);
  for (std::size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<std::uint8_t>(i * 31 + 7);
  CU(cuMemcpyHtoD(p, pattern.data(), bytes));

  CUipcMemHandle h{}, again{}, interior{};
  CU(cuIpcGetMemHandle(&h, p));
  CU(cuIpcGetMemHandle(&again, p));
  EXPECT_TRUE(same_handle(h, again)) << "asking again is lightweight and gives the same handle";
  CU(cuIpcGetMemHandle(&interior, p + 4096));
  EXPECT_TRUE(same_handle(h, interior)) << "a pointer into the allocation exports the whole allocation";
  const std::size_t exporter_free = free_bytes();
  const unsigned long long exporter_memory = nvml_process_memory(static_cast<unsigned>(getpid()));
  EXPECT_EQ(round_up_512(bytes), exporter_memory);

  Sibling([&] {
    CUcontext ctx = nullptr;
    start_driver(&ctx);
    ASSERT_EQ(NVML_SUCCESS, nvmlInit_v2());
    const std::size_t before = free_bytes();
    EXPECT_EQ(exporter_free, before);
    CUdeviceptr q = 0;
    ASSERT_CU(CUDA_SUCCESS, cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    ASSERT_NE(0u, q);
    // Opening maps the exporter's memory: no new device memory, none charged to the importer, and
    // the exporter is still the process that holds it (as nvidia-smi shows it).
    EXPECT_EQ(before, free_bytes());
    EXPECT_EQ(0u, nvml_process_memory(static_cast<unsigned>(getpid())));
    EXPECT_EQ(exporter_memory, nvml_process_memory(static_cast<unsigned>(getppid())));
    EXPECT_EQ(0, simgpu_stat_process_memory(getpid())) << "simgpu-stat charges the importer nothing";
    // The exported allocation's range.
    CUdeviceptr base = 0;
    std::size_t size = 0;
    EXPECT_CU(CUDA_SUCCESS, cuMemGetAddressRange(&base, &size, q + 100));
    EXPECT_EQ(q, base);
    EXPECT_EQ(bytes, size);
    unsigned type = 0;
    EXPECT_CU(CUDA_SUCCESS, cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q));
    EXPECT_EQ(static_cast<unsigned>(CU_MEMORYTYPE_DEVICE), type);
    // The exporter's data, and writes the exporter will see.
    std::vector<std::uint8_t> seen(bytes);
    EXPECT_CU(CUDA_SUCCESS, cuMemcpyDtoH(seen.data(), q, bytes));
    EXPECT_TRUE(seen == pattern) << "the importer reads what the exporter wrote";
    EXPECT_CU(CUDA_SUCCESS, cuMemsetD32(q, 0xC0FFEE11u, 1024));
    EXPECT_CU(CUDA_SUCCESS, cuMemsetD8(q + bytes - 1, 0x5A, 1));
    // Opened again by the same context: the same pointer, one more reference.
    CUdeviceptr q2 = 0;
    EXPECT_CU(CUDA_SUCCESS, cuIpcOpenMemHandle(&q2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    EXPECT_EQ(q, q2);
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(q)) << "opened memory is closed, not freed";
    EXPECT_CU(CUDA_SUCCESS, cuIpcCloseMemHandle(q));
    EXPECT_CU(CUDA_SUCCESS, cuMemcpyDtoH(seen.data(), q, 16)) << "still mapped: one reference is left";
    EXPECT_CU(CUDA_SUCCESS, cuIpcCloseMemHandle(q));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemcpyDtoH(seen.data(), q, 16)) << "unmapped by the last close";
    EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, q));
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcCloseMemHandle(q)) << "closed already";
    EXPECT_EQ(before, free_bytes());
    EXPECT_EQ(NVML_SUCCESS, nvmlShutdown());
    EXPECT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRelease(0));
  });

  std::vector<std::uint32_t> words(1024);
  CU(cuMemcpyDtoH(words.data(), p, 4096));
  EXPECT_TRUE(std::all_of(words.begin(), words.end(), [](std::uint32_t w) { return w == 0xC0FFEE11u; }))
      << "the exporter sees what the importer wrote";
  std::uint8_t last = 0;
  CU(cuMemcpyDtoH(&last, p + bytes - 1, 1));
  EXPECT_EQ(0x5A, last);
  EXPECT_EQ(exporter_free, free_bytes()) << "the importer's exit changes nothing here";
  CU(cuMemFree(p));
}

TEST_F(Sim, IpcOfPitchedMemoryAndOfAnImporterThatExits) {
  CUdeviceptr p = 0;
  std::size_t pitch = 0;
  CU(cuMemAllocPitch(&p, &pitch, 1000, 7, 4));
  ASSERT_EQ(1024u, pitch);
  CU(cuMemsetD8(p, 0x11, pitch * 7));
  CUipcMemHandle h{};
  CU(cuIpcGetMemHandle(&h, p));
  Sibling([&] {
    CUcontext ctx = nullptr;
    start_driver(&ctx);
    CUdeviceptr q = 0;
    ASSERT_CU(CUDA_SUCCESS, cuIpcOpenMemHandle(&q, h, 0));
    CUdeviceptr base = 0;
    std::size_t size = 0;
    EXPECT_CU(CUDA_SUCCESS, cuMemGetAddressRange(&base, &size, q));
    EXPECT_EQ(q, base);
    EXPECT_EQ(1024u * 7, size) << "pitch times height";
    std::uint8_t b = 0;
    EXPECT_CU(CUDA_SUCCESS, cuMemcpyDtoH(&b, q + 1024 * 6 + 999, 1));
    EXPECT_EQ(0x11, b);
    EXPECT_CU(CUDA_SUCCESS, cuMemsetD8(q + 1024 * 6 + 999, 0x22, 1));
    // Exits with the handle still open: the driver unmaps it, and the exporter keeps its memory.
  });
  std::uint8_t b = 0;
  CU(cuMemcpyDtoH(&b, p + 1024 * 6 + 999, 1));
  EXPECT_EQ(0x22, b);
  CU(cuMemFree(p));
}

TEST_F(Sim, IpcErrorsAsDocumented) {
  CUdeviceptr p = 0;
  CU(cuMemAlloc(&p, 64 * KiB));
  CUipcMemHandle h{};
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(nullptr, p));
  CU(cuIpcGetMemHandle(&h, p));

  // Opening one's own handle: the real driver answers "invalid device context".
  CUdeviceptr q = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuIpcOpenMemHandle(&q, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcOpenMemHandle(nullptr, h, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcOpenMemHandle(&q, h, 0x4)) << "an unknown flag";

  // Memory of the wrong kind cannot be exported: legacy IPC is for cuMemAlloc memory only.
  int legacy = -1;
  CU(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p));
  EXPECT_EQ(1, legacy);
  CUipcMemHandle bad{};
  CUstream s = nullptr;
  CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr pooled = 0, managed = 0;
  CU(cuMemAllocAsync(&pooled, 64 * KiB, s));
  CU(cuMemAllocManaged(&managed, 64 * KiB, CU_MEM_ATTACH_GLOBAL));
  void* host = nullptr;
  CU(cuMemAllocHost(&host, 64 * KiB));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(&bad, pooled)) << "stream-ordered (pool) memory";
  CU(cuPointerGetAttribute(&legacy, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, pooled));
  EXPECT_EQ(0, legacy);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(&bad, managed)) << "managed memory";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(&bad, reinterpret_cast<CUdeviceptr>(host))) << "host memory";
  int on_stack = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(&bad, reinterpret_cast<CUdeviceptr>(&on_stack)));
  // Memory mapped with the virtual memory management API.
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle phys = 0;
  CUdeviceptr va = 0;
  CU(cuMemCreate(&phys, kChunk, &prop, 0));
  CU(cuMemAddressReserve(&va, kChunk, 0, 0, 0));
  CU(cuMemMap(va, kChunk, 0, phys, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(&bad, va)) << "cuMemMap memory";
  CU(cuMemUnmap(va, kChunk));
  CU(cuMemAddressFree(va, kChunk));
  CU(cuMemRelease(phys));
  CU(cuMemFreeAsync(pooled, s));
  CU(cuStreamSynchronize(s));
  CU(cuStreamDestroy(s));
  CU(cuMemFree(managed));
  CU(cuMemFreeHost(host));

  // Closing what was not opened.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcCloseMemHandle(p));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcCloseMemHandle(0));

  // Without a current context.
  CUcontext c = nullptr;
  CU(cuCtxPopCurrent(&c));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuIpcGetMemHandle(&bad, p));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuIpcOpenMemHandle(&q, h, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_CONTEXT, cuIpcCloseMemHandle(p));
  CU(cuCtxPushCurrent(c));

  // A freed allocation's handle opens nothing, and memory allocated after it has a handle of its own.
  CUipcMemHandle freed{};
  CU(cuMemFree(p));
  freed = h;
  CUdeviceptr p2 = 0;
  CU(cuMemAlloc(&p2, 64 * KiB));
  CUipcMemHandle h2{};
  CU(cuIpcGetMemHandle(&h2, p2));
  EXPECT_FALSE(same_handle(freed, h2)) << "a new allocation gets a unique handle, even at the same address";
  CUipcMemHandle garbage;
  std::memset(&garbage, 0xA5, sizeof garbage);
  CUipcMemHandle zero{};
  Sibling([&] {
    CUcontext ctx = nullptr;
    start_driver(&ctx);
    CUdeviceptr q = 0;
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcOpenMemHandle(&q, freed, 0)) << "the exporter freed it";
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcOpenMemHandle(&q, garbage, 0)) << "not a handle";
    EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcOpenMemHandle(&q, zero, 0)) << "not a handle";
    EXPECT_CU(CUDA_SUCCESS, cuIpcOpenMemHandle(&q, h2, 0));
    EXPECT_CU(CUDA_SUCCESS, cuIpcCloseMemHandle(q));
    EXPECT_CU(CUDA_SUCCESS, cuDevicePrimaryCtxRelease(0));
  });
  CU(cuMemFree(p2));
}

TEST_F(Sim, IpcHandleOfAnExporterThatExitedOpensNothing) {
  // The child exports and hands the handle over a pipe, then exits; its memory goes with it.
  int fds[2];
  ASSERT_EQ(0, pipe(fds));
  Sibling([&] {
    close(fds[0]);
    CUcontext ctx = nullptr;
    start_driver(&ctx);
    CUdeviceptr p = 0;
    ASSERT_CU(CUDA_SUCCESS, cuMemAlloc(&p, 4 * MiB));
    CUipcMemHandle h{};
    ASSERT_CU(CUDA_SUCCESS, cuIpcGetMemHandle(&h, p));
    ASSERT_EQ(static_cast<ssize_t>(sizeof h), write(fds[1], &h, sizeof h));
    close(fds[1]);
  });
  close(fds[1]);
  CUipcMemHandle h{};
  ASSERT_EQ(static_cast<ssize_t>(sizeof h), read(fds[0], &h, sizeof h));
  close(fds[0]);
  CUdeviceptr q = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcOpenMemHandle(&q, h, 0));
}

TEST_F(Sim, IpcAndGraphMemoryExportsAreImplementedAndReachable) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(nullptr, lib);
  // name asked of cuGetProcAddress at CUDA 13.0 -> the export it must hand out.
  const std::pair<const char*, const char*> names[] = {
      {"cuIpcGetMemHandle", "cuIpcGetMemHandle"},
      {"cuIpcOpenMemHandle", "cuIpcOpenMemHandle_v2"},
      {"cuIpcCloseMemHandle", "cuIpcCloseMemHandle"},
      {"cuGraphAddMemAllocNode", "cuGraphAddMemAllocNode"},
      {"cuGraphAddMemFreeNode", "cuGraphAddMemFreeNode"},
      {"cuGraphMemAllocNodeGetParams", "cuGraphMemAllocNodeGetParams"},
      {"cuGraphMemFreeNodeGetParams", "cuGraphMemFreeNodeGetParams"},
      {"cuDeviceGraphMemTrim", "cuDeviceGraphMemTrim"},
      {"cuDeviceGetGraphMemAttribute", "cuDeviceGetGraphMemAttribute"},
      {"cuDeviceSetGraphMemAttribute", "cuDeviceSetGraphMemAttribute"},
  };
  for (const auto& [name, exported] : names) {
    void* pfn = nullptr;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    EXPECT_CU(CUDA_SUCCESS, cuGetProcAddress(name, &pfn, 13000, 0, &status)) << name;
    EXPECT_EQ(dlsym(lib, exported), pfn) << name;
  }
  // Not the CUDA_ERROR_NOT_SUPPORTED stubs: each answers its own argument check.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcGetMemHandle(nullptr, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuIpcCloseMemHandle(0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode(nullptr, nullptr, nullptr, 0, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode(nullptr, nullptr, nullptr, 0, 0));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphMemAllocNodeGetParams(nullptr, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphMemFreeNodeGetParams(nullptr, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGraphMemTrim(7));
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceGetGraphMemAttribute(7, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, nullptr));
  EXPECT_CU(CUDA_ERROR_INVALID_DEVICE, cuDeviceSetGraphMemAttribute(7, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, nullptr));
  dlclose(lib);
}

// ---------------------------------------------------------------------------------------------
// Graph memory nodes
// ---------------------------------------------------------------------------------------------

CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(std::size_t bytes) {
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = 0;
  p.bytesize = bytes;
  return p;
}

// Sim whose graph memory pool starts empty, with fresh high watermarks, and is trimmed at the end.
class GraphMemory : public Sim {
 protected:
  void SetUp() override {
    Sim::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_CU(CUDA_SUCCESS, cuDeviceGraphMemTrim(0));
    cuuint64_t zero = 0;
    ASSERT_CU(CUDA_SUCCESS, cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
    ASSERT_CU(CUDA_SUCCESS, cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero));
    ASSERT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
    ASSERT_CU(CUDA_SUCCESS, cuStreamCreate(&s_, CU_STREAM_NON_BLOCKING));
    f0_ = free_bytes();
  }
  void TearDown() override {
    if (s_) {
      EXPECT_CU(CUDA_SUCCESS, cuStreamSynchronize(s_));
      EXPECT_CU(CUDA_SUCCESS, cuStreamDestroy(s_));
    }
    EXPECT_CU(CUDA_SUCCESS, cuDeviceGraphMemTrim(0));
    Sim::TearDown();
  }
  CUstream s_ = nullptr;
  std::size_t f0_ = 0;
};

TEST_F(GraphMemory, AllocNodeHasAFixedAddressAndMemoryIsTakenAtLaunchAndKeptUntilTrim) {
  CUgraph graph = nullptr;
  CU(cuGraphCreate(&graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(3 * MiB);
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  p.accessDescs = &access;
  p.accessDescCount = 1;
  CUgraphNode alloc = nullptr, freer = nullptr;
  CU(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &p));
  ASSERT_NE(0u, p.dptr) << "the address is returned in nodeParams.dptr when the node is added";
  EXPECT_EQ(f0_, free_bytes()) << "an allocation node takes no memory";
  CU(cuGraphAddMemFreeNode(&freer, graph, &alloc, 1, p.dptr));
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CU(cuGraphNodeGetType(alloc, &type));
  EXPECT_EQ(CU_GRAPH_NODE_TYPE_MEM_ALLOC, type);
  CU(cuGraphNodeGetType(freer, &type));
  EXPECT_EQ(CU_GRAPH_NODE_TYPE_MEM_FREE, type);
  CUDA_MEM_ALLOC_NODE_PARAMS got{};
  CU(cuGraphMemAllocNodeGetParams(alloc, &got));
  EXPECT_EQ(p.dptr, got.dptr);
  EXPECT_EQ(3 * MiB, got.bytesize);
  EXPECT_EQ(CU_MEM_ALLOCATION_TYPE_PINNED, got.poolProps.allocType);
  EXPECT_EQ(0, got.poolProps.location.id);
  ASSERT_EQ(1u, got.accessDescCount);
  EXPECT_NE(&access, got.accessDescs) << "the node owns its copy";
  EXPECT_EQ(CU_MEM_ACCESS_FLAGS_PROT_READWRITE, got.accessDescs[0].flags);
  CUdeviceptr freed = 0;
  CU(cuGraphMemFreeNodeGetParams(freer, &freed));
  EXPECT_EQ(p.dptr, freed);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphMemFreeNodeGetParams(alloc, &freed)) << "not a free node";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphMemAllocNodeGetParams(freer, &got)) << "not an allocation node";

  // Instantiation takes no physical memory; only one executable graph may exist at a time.
  CUgraphExec exec = nullptr, second = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(f0_, free_bytes()) << "physical memory is not taken at instantiation";
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphInstantiate(&second, graph, 0));

  // The first launch takes it, from the graph pool, in whole 2 MiB chunks.
  CU(cuGraphLaunch(exec, s_));
  EXPECT_EQ(f0_ - 4 * MiB, free_bytes());
  EXPECT_EQ(4 * MiB, graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_EQ(3 * MiB, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  EXPECT_EQ(kDeviceBytes - free_bytes(), nvml_used()) << "NVML sees the pool as memory in use";
  EXPECT_EQ(static_cast<long long>(nvml_process_memory(static_cast<unsigned>(getpid()))),
            simgpu_stat_process_memory(getpid()))
      << "simgpu-stat and NVML agree on this process's memory";
  const unsigned long long mine = nvml_process_memory(static_cast<unsigned>(getpid()));
  CU(cuStreamSynchronize(s_));
  // Relaunches reuse it: same address, nothing more taken.
  CU(cuGraphLaunch(exec, s_));
  CU(cuGraphLaunch(exec, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(f0_ - 4 * MiB, free_bytes());
  CU(cuGraphMemAllocNodeGetParams(alloc, &got));
  EXPECT_EQ(p.dptr, got.dptr) << "fixed across launches";
  // Memory freed inside the graph is not reachable from outside it.
  CUdeviceptr base = 0;
  std::size_t size = 0;
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, p.dptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(p.dptr));

  // Destroying the executable graph and the graph keeps the memory in the pool...
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  EXPECT_EQ(4 * MiB, graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_EQ(f0_ - 4 * MiB, free_bytes()) << "destroying a graph does not give its memory back";
  EXPECT_EQ(mine, nvml_process_memory(static_cast<unsigned>(getpid())));
  // ...until cuDeviceGraphMemTrim.
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
  EXPECT_EQ(f0_, free_bytes());
  EXPECT_EQ(mine - 4 * MiB, nvml_process_memory(static_cast<unsigned>(getpid())));

  // The high watermarks stay until reset, which only takes 0 and restarts from the current amount.
  EXPECT_EQ(3 * MiB, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH));
  EXPECT_EQ(4 * MiB, graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH));
  cuuint64_t v = 5;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &v));
  v = 0;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v))
      << "a current amount cannot be set";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT, &v));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, nullptr));
  CU(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &v));
  CU(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &v));
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH));
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH));
}

TEST_F(GraphMemory, UploadTakesTheMemoryBeforeTheLaunch) {
  CUgraph graph = nullptr;
  CU(cuGraphCreate(&graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(1000);
  CUgraphNode alloc = nullptr, freer = nullptr;
  CU(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &p));
  CU(cuGraphAddMemFreeNode(&freer, graph, &alloc, 1, p.dptr));
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(f0_, free_bytes());
  CU(cuGraphUpload(exec, s_));
  EXPECT_EQ(f0_ - kChunk, free_bytes());
  EXPECT_EQ(1024u, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT)) << "1000 bytes take 1024";
  CU(cuGraphLaunch(exec, s_));
  EXPECT_EQ(f0_ - kChunk, free_bytes()) << "the launch needs nothing more";
  CU(cuStreamSynchronize(s_));
  // A trim gives back what an idle executable graph holds; its next launch takes it again.
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(f0_, free_bytes());
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  CU(cuGraphLaunch(exec, s_));
  EXPECT_EQ(f0_ - kChunk, free_bytes());
  CU(cuStreamSynchronize(s_));
  CU(cuGraphExecDestroy(exec));
  // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD uploads at instantiation.
  CUDA_GRAPH_INSTANTIATE_PARAMS ip{};
  ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
  ip.hUploadStream = s_;
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(f0_, free_bytes());
  CU(cuGraphInstantiateWithParams(&exec, graph, &ip));
  EXPECT_EQ(CUDA_GRAPH_INSTANTIATE_SUCCESS, ip.result_out);
  EXPECT_EQ(1024u, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
}

TEST_F(GraphMemory, AnUnfreedAllocationOutlivesTheLaunchUntilCuMemFree) {
  CUgraph graph = nullptr;
  CU(cuGraphCreate(&graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(1 * MiB);
  CUgraphNode alloc = nullptr;
  CU(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &p));
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  CU(cuGraphLaunch(exec, s_));
  // Stream work ordered after the launch may use it.
  std::vector<std::uint32_t> in(256, 0x600DF00Du), out(256, 0);
  CU(cuMemcpyHtoDAsync(p.dptr, in.data(), 1024, s_));
  CU(cuMemcpyDtoHAsync(out.data(), p.dptr, 1024, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(in, out);
  CUdeviceptr base = 0;
  std::size_t size = 0;
  CU(cuMemGetAddressRange(&base, &size, p.dptr + 10));
  EXPECT_EQ(p.dptr, base);
  EXPECT_EQ(1 * MiB, size);
  unsigned type = 0;
  CU(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p.dptr));
  EXPECT_EQ(static_cast<unsigned>(CU_MEMORYTYPE_DEVICE), type);
  // Unfreed: relaunching fails; a trim leaves it alone.
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphLaunch(exec, s_));
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(f0_ - kChunk, free_bytes()) << "a live allocation is in use";
  // cuMemFreeAsync ends it; the graph can run again.
  CU(cuMemFreeAsync(p.dptr, s_));
  CU(cuGraphLaunch(exec, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(f0_ - kChunk, free_bytes());
  // The graph and its executable go while the allocation lives: it stays, until cuMemFree.
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
  CU(cuMemsetD8(p.dptr, 1, 1 * MiB));
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(f0_ - kChunk, free_bytes());
  EXPECT_EQ(1 * MiB, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  CU(cuMemFree(p.dptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuMemFree(p.dptr)) << "freed already";
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  EXPECT_EQ(f0_ - kChunk, free_bytes()) << "back in the pool, not on the device";
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(f0_, free_bytes());
}

TEST_F(GraphMemory, AutoFreeOnLaunchAndFreeNodesInAnotherGraph) {
  CUgraph owner = nullptr, other = nullptr;
  CU(cuGraphCreate(&owner, 0));
  CU(cuGraphCreate(&other, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(512 * KiB);
  CUgraphNode alloc = nullptr, f = nullptr, bad = nullptr;
  CU(cuGraphAddMemAllocNode(&alloc, owner, nullptr, 0, &p));
  // CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: relaunching frees what the last launch left.
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiateWithFlags(&exec, owner, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
  CU(cuGraphLaunch(exec, s_));
  CU(cuGraphLaunch(exec, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(512 * KiB, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  // A free node in another graph frees it when that graph runs.
  CU(cuGraphAddMemFreeNode(&f, other, nullptr, 0, p.dptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode(&bad, other, nullptr, 0, p.dptr)) << "twice in one graph";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode(&bad, owner, nullptr, 0, p.dptr))
      << "freed in another graph: the owning graph can no longer free it";
  CUgraphExec free_exec = nullptr;
  CU(cuGraphInstantiate(&free_exec, other, 0));
  CUdeviceptr base = 0;
  std::size_t size = 0;
  CU(cuMemGetAddressRange(&base, &size, p.dptr));
  CU(cuGraphLaunch(free_exec, s_));
  EXPECT_CU(CUDA_ERROR_NOT_FOUND, cuMemGetAddressRange(&base, &size, p.dptr)) << "freed by the other graph";
  CU(cuStreamSynchronize(s_));
  CU(cuGraphExecDestroy(free_exec));
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(other));
  CU(cuGraphDestroy(owner));

  // Free nodes name graph allocations only, once per graph; one freed in its own graph cannot be
  // freed in another.
  CUgraph g = nullptr, h = nullptr;
  CU(cuGraphCreate(&g, 0));
  CU(cuGraphCreate(&h, 0));
  CUdeviceptr plain = 0;
  CU(cuMemAlloc(&plain, 4096));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode(&bad, g, nullptr, 0, plain)) << "not a graph allocation";
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode(&bad, g, nullptr, 0, 0xdead0000ull)) << "no allocation";
  CUDA_MEM_ALLOC_NODE_PARAMS q = alloc_params(4096);
  CU(cuGraphAddMemAllocNode(&alloc, g, nullptr, 0, &q));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode(&bad, g, &alloc, 1, q.dptr + 512)) << "not its address";
  CU(cuGraphAddMemFreeNode(&f, g, &alloc, 1, q.dptr));
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemFreeNode(&bad, h, nullptr, 0, q.dptr))
      << "freed in its own graph: no other graph can free it";
  // Parameters the node refuses.
  CUDA_MEM_ALLOC_NODE_PARAMS r = alloc_params(0);
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode(&bad, g, nullptr, 0, &r)) << "0 bytes";
  r = alloc_params(4096);
  r.poolProps.location.id = 3;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode(&bad, g, nullptr, 0, &r)) << "no such device";
  r = alloc_params(4096);
  r.poolProps.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode(&bad, g, nullptr, 0, &r)) << "IPC is not supported";
  r = alloc_params(4096);
  r.accessDescCount = 2;
  EXPECT_CU(CUDA_ERROR_INVALID_VALUE, cuGraphAddMemAllocNode(&bad, g, nullptr, 0, &r)) << "more than the GPUs";
  CU(cuMemFree(plain));
  CU(cuGraphDestroy(h));
  CU(cuGraphDestroy(g));
  EXPECT_EQ(f0_ - kChunk, free_bytes());
}

TEST_F(GraphMemory, LaunchIsRefusedWhenTheDeviceIsFull) {
  CUgraph graph = nullptr;
  CU(cuGraphCreate(&graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(3 * MiB);
  CUgraphNode alloc = nullptr, freer = nullptr;
  CU(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &p));
  CU(cuGraphAddMemFreeNode(&freer, graph, &alloc, 1, p.dptr));
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  CUdeviceptr hog = 0;
  CU(cuMemAlloc(&hog, f0_ - 3 * MiB));  // 3 MiB left: less than the two chunks the graph needs
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuGraphUpload(exec, s_));
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuGraphLaunch(exec, s_));
  EXPECT_EQ(3 * MiB, free_bytes()) << "a refused launch takes nothing";
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT));
  CU(cuMemFree(hog));
  CU(cuGraphLaunch(exec, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(f0_ - 4 * MiB, free_bytes());
  // With the pool holding it, the device has that much less for everyone else.
  CU(cuMemAlloc(&hog, f0_ - 4 * MiB));
  CUdeviceptr more = 0;
  EXPECT_CU(CUDA_ERROR_OUT_OF_MEMORY, cuMemAlloc(&more, 1));
  CU(cuMemFree(hog));
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
}

TEST_F(GraphMemory, TrimKeepsTheMemoryOfAGraphThatIsRunning) {
  // A host node that waits holds the launch on the device.
  static std::atomic<bool> release{false};
  release = false;
  CUgraph graph = nullptr;
  CU(cuGraphCreate(&graph, 0));
  CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params(1 * MiB);
  CUgraphNode alloc = nullptr, wait = nullptr, freer = nullptr;
  CU(cuGraphAddMemAllocNode(&alloc, graph, nullptr, 0, &p));
  CUDA_HOST_NODE_PARAMS hp{};
  hp.fn = [](void*) {
    while (!release) std::this_thread::sleep_for(1ms);
  };
  CU(cuGraphAddHostNode(&wait, graph, &alloc, 1, &hp));
  CU(cuGraphAddMemFreeNode(&freer, graph, &wait, 1, p.dptr));
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  CU(cuGraphLaunch(exec, s_));
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(f0_ - kChunk, free_bytes()) << "a running graph uses its memory";
  // Destroyed while it runs: the memory goes back to the pool when the launch ends.
  CU(cuGraphExecDestroy(exec));
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(f0_ - kChunk, free_bytes());
  release = true;
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(0u, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  CU(cuDeviceGraphMemTrim(0));
  EXPECT_EQ(f0_, free_bytes());
  CU(cuGraphDestroy(graph));
}

TEST_F(GraphMemory, CapturedAllocAndFreeAsyncBecomeMemoryNodes) {
  CUmemoryPool pool = nullptr;
  CU(cuDeviceGetDefaultMemPool(&pool, 0));
  CU(cuStreamBeginCapture(s_, CU_STREAM_CAPTURE_MODE_GLOBAL));
  CUdeviceptr p = 0;
  CU(cuMemAllocAsync(&p, 1 * MiB, s_));
  ASSERT_NE(0u, p);
  CU(cuMemFreeAsync(p, s_));
  CUgraph graph = nullptr;
  CU(cuStreamEndCapture(s_, &graph));
  EXPECT_EQ(f0_, free_bytes()) << "captured allocations take nothing";
  cuuint64_t reserved = 1;
  CU(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
  EXPECT_EQ(0u, reserved) << "nor anything from the stream-ordered pool";
  std::size_t n = 0;
  CU(cuGraphGetNodes(graph, nullptr, &n));
  ASSERT_EQ(2u, n);
  CUgraphNode nodes[2] = {};
  CU(cuGraphGetNodes(graph, nodes, &n));
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  CU(cuGraphNodeGetType(nodes[0], &type));
  EXPECT_EQ(CU_GRAPH_NODE_TYPE_MEM_ALLOC, type);
  CU(cuGraphNodeGetType(nodes[1], &type));
  EXPECT_EQ(CU_GRAPH_NODE_TYPE_MEM_FREE, type);
  CUDA_MEM_ALLOC_NODE_PARAMS got{};
  CU(cuGraphMemAllocNodeGetParams(nodes[0], &got));
  EXPECT_EQ(p, got.dptr);
  EXPECT_EQ(1 * MiB, got.bytesize);
  CUgraphExec exec = nullptr;
  CU(cuGraphInstantiate(&exec, graph, 0));
  CU(cuGraphLaunch(exec, s_));
  CU(cuStreamSynchronize(s_));
  EXPECT_EQ(f0_ - kChunk, free_bytes());
  EXPECT_EQ(1 * MiB, graph_attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT));
  CU(cuGraphExecDestroy(exec));
  CU(cuGraphDestroy(graph));
}

}  // namespace
