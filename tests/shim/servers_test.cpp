// What inference servers size themselves by shows the slice (issue 26), each test written from the
// server's documented behaviour (the file it follows is named), on the simulated GPU under a 2 GiB
// cap, with contexts of 256 MiB as real ones take hundreds of MiB. Then behaviours nothing else tests:
// usage above the cap, null pointers to cuMemGetInfo, cuCtxCreate's newest ABI, host VMM memory.
#include <dlfcn.h>

#include <chrono>
#include <thread>
#include <vector>

#include "nvml_api.h"
#include "shim_test_support.h"

namespace {

using namespace slice_test;

constexpr std::uint64_t kCap = 2048 * kMiB;     // SLICE_MEMORY_LIMIT
constexpr std::uint64_t kContext = 256 * kMiB;  // SIMGPU_CONTEXT_BYTES
constexpr std::uint64_t kGranule = 2 * kMiB;    // the VMM granularity

class Servers : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(cuDeviceGet(&device_, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&context_, device_), CUDA_SUCCESS);
  }
  void SetUp() override {
    ASSERT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
    ASSERT_EQ(mem_info().total - mem_info().free, kContext) << "a test before left something charged";
  }
  static inline CUdevice device_ = 0;
  static inline CUcontext context_ = nullptr;
};

CUmemAllocationProp device_prop(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// vLLM, vllm/worker/gpu_worker.py (determine_num_available_blocks) and vllm/utils (MemorySnapshot):
// torch.cuda.mem_get_info(), that is cudaMemGetInfo, before and after profiling; the KV cache gets
// total * gpu_memory_utilization less what is in use. Total must be the cap, and free must fall at
// once by exactly what each allocation, VMM allocation and pool takes, the context included.
TEST_F(Servers, VllmSizesItselfByMemGetInfo) {
  MemInfo m = mem_info();
  EXPECT_EQ(m.total, kCap);
  EXPECT_EQ(m.total - m.free, kContext) << "the context is in use";
  CUdeviceptr weights = 0;
  ASSERT_EQ(cuMemAlloc_v2(&weights, 300 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().free, m.free - 300 * kMiB);
  // Its CuMemAllocator (sleep mode): cuMemCreate, then mapped.
  const CUmemAllocationProp prop = device_prop(device_);
  CUmemGenericAllocationHandle handle = 0;
  ASSERT_EQ(cuMemCreate(&handle, 256 * kMiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().free, m.free - 556 * kMiB);
  CUdeviceptr range = 0;
  ASSERT_EQ(cuMemAddressReserve(&range, 256 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(range, 256 * kMiB, 0, handle, 0), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().free, m.free - 556 * kMiB) << "a mapping takes nothing more";
  // A stream-ordered allocation: what the default pool took.
  CUstream stream = nullptr;
  ASSERT_EQ(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr pooled = 0;
  ASSERT_EQ(cuMemAllocAsync(&pooled, 64 * kMiB, stream), CUDA_SUCCESS);
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&pool, device_), CUDA_SUCCESS);
  cuuint64_t reserved = 0;
  ASSERT_EQ(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().free, m.free - 556 * kMiB - reserved);
  ASSERT_EQ(cuMemFreeAsync(pooled, stream), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(stream), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolTrimTo(pool, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemUnmap(range, 256 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(range, 256 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(cuMemRelease(handle), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(weights), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(stream), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().free, m.free);
}

// SGLang, python/sglang/srt/utils.py (get_nvgpu_memory_capacity): runs
// `nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits` as a child and takes the
// smallest. nvidia-smi is NVML's: a child of the server that never starts CUDA must be told the slice
// of the server it descends from, also given an environment that names neither the tenant nor the
// cap (a server whose cap an administrator's policy or a device plugin set); on ba97fea it was told
// the whole device.
TEST_F(Servers, SglangReadsTheTotalFromAnNvmlChild) {
  std::string out;
  EXPECT_EQ(run_child("smi", {"SLICE_TENANT=", "SLICE_MEMORY_LIMIT="}, &out), 0) << out;
  EXPECT_EQ(out, std::to_string(kCap >> 20) + "\n") << "nvidia-smi's memory.total in MiB";
}

// llama.cpp, ggml/src/ggml-cuda/ggml-cuda.cu: ggml_cuda_init (cudaGetDeviceProperties' totalGlobalMem,
// the runtime's cuDeviceTotalMem_v2), ggml_backend_cuda_get_device_memory (cudaMemGetInfo), and
// ggml_cuda_pool_vmm: a 32 GiB range reserved, grown by cuMemCreate + cuMemMap + cuMemSetAccess as
// the model needs, until the driver says CUDA_ERROR_OUT_OF_MEMORY, cleanly.
TEST_F(Servers, LlamaCppGrowsAVmmPoolToACleanOutOfMemory) {
  std::size_t total = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&total, device_), CUDA_SUCCESS);
  EXPECT_EQ(total, kCap);
  constexpr std::size_t kRange = std::size_t{32} << 30, kStep = 64 * kMiB;
  CUdeviceptr base = 0;
  ASSERT_EQ(cuMemAddressReserve(&base, kRange, 0, 0, 0), CUDA_SUCCESS);
  const CUmemAllocationProp prop = device_prop(device_);
  std::vector<CUmemGenericAllocationHandle> handles;
  CUresult rc = CUDA_SUCCESS;
  while (handles.size() * kStep < kRange) {
    CUmemGenericAllocationHandle h = 0;
    if ((rc = cuMemCreate(&h, kStep, &prop, 0)) != CUDA_SUCCESS) break;
    const CUdeviceptr at = base + handles.size() * kStep;
    ASSERT_EQ(cuMemMap(at, kStep, 0, h, 0), CUDA_SUCCESS);
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    ASSERT_EQ(cuMemSetAccess(at, kStep, &access, 1), CUDA_SUCCESS);
    handles.push_back(h);
  }
  EXPECT_EQ(rc, CUDA_ERROR_OUT_OF_MEMORY) << "the pool's growth ends with the driver's out-of-memory";
  EXPECT_EQ(handles.size() * kStep, (kCap - kContext) / kStep * kStep) << "grown to the cap, not past it";
  EXPECT_LT(mem_info().free, kStep);
  for (std::size_t i = 0; i < handles.size(); ++i) {
    ASSERT_EQ(cuMemUnmap(base + i * kStep, kStep), CUDA_SUCCESS);
    ASSERT_EQ(cuMemRelease(handles[i]), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuMemAddressFree(base, kRange), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().free, kCap - kContext);
}

// Ollama, discover/gpu_info_nvcuda.c and gpu_info_nvml.c: before any context, dlopen of libcuda and
// dlsym of cuInit, cuDeviceGetCount, cuDeviceGet, cuDeviceTotalMem_v2; and of NVML,
// nvmlDeviceGetMemoryInfo (v1) through dlsym. Both must say the slice.
TEST_F(Servers, OllamaAsksTheDriverAndNvmlBeforeAnyContext) {
  std::string out;
  EXPECT_EQ(run_child("ollama", {"SLICE_TENANT=ollama-probe"}, &out), 0) << out;
  const std::string cap = std::to_string(kCap >> 20);
  EXPECT_NE(out.find("cuDeviceTotalMem_v2 " + cap + " MiB"), std::string::npos) << out;
  EXPECT_NE(out.find("nvmlDeviceGetMemoryInfo total " + cap + " MiB"), std::string::npos) << out;
}

// ComfyUI, comfy/model_management.py (get_free_memory): free = torch.cuda.mem_get_info's free plus
// what PyTorch's caching allocator holds but does not use (memory_stats reserved - active). With
// the slice's figures that is what the process may still use: the cap less the context and what is
// active.
TEST_F(Servers, ComfyUiCountsWhatItsAllocatorKeepsAsFree) {
  CUdeviceptr reserved_block = 0;
  ASSERT_EQ(cuMemAlloc_v2(&reserved_block, 512 * kMiB), CUDA_SUCCESS);  // the allocator's segment
  constexpr std::uint64_t kActive = 128 * kMiB;                         // of which tensors use this
  const MemInfo m = mem_info();
  EXPECT_EQ(m.free + (512 * kMiB - kActive), kCap - kContext - kActive);
  ASSERT_EQ(cuMemFree_v2(reserved_block), CUDA_SUCCESS);
}

TEST_F(Servers, UsageAboveTheCapShowsNoFreeMemoryAndNoError) {
  // The driver holds memory no call asked for (a malloc heap): reconciled, it takes the usage past
  // the cap. cuMemGetInfo still succeeds: total the cap, free 0, never negative.
  ASSERT_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * kMiB + kCap), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));  // a report reconciles once a second
  std::size_t free_bytes = 1, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  EXPECT_EQ(total, kCap);
  EXPECT_EQ(free_bytes, 0u);
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, 8 * kMiB), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(1050));
  EXPECT_EQ(mem_info().free, kCap - kContext);
}

TEST_F(Servers, NullPointersToMemGetInfoAnswerAsTheDriverDoes) {
  std::string driver, sliced;
  ASSERT_EQ(run_child("null-mem-info", {"SLICE_DISABLE=1"}, &driver), 0) << driver;
  ASSERT_EQ(run_child("null-mem-info", {}, &sliced), 0) << sliced;
  EXPECT_EQ(sliced, driver);
  EXPECT_NE(driver.find("both null"), std::string::npos) << driver;
}

TEST_F(Servers, CuCtxCreateIsChargedThroughItsNewestAbi) {
  // cuda.h 13 makes cuCtxCreate cuCtxCreate_v4.
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0, device_), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().total - mem_info().free, 2 * kContext);
  ASSERT_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(context_), CUDA_SUCCESS);
  EXPECT_EQ(mem_info().total - mem_info().free, kContext);
}

TEST_F(Servers, HostVmmAllocationsAreNotDeviceMemory) {
  // NCCL's host buffers: cuMemCreate with a HOST or HOST_NUMA location is host memory (cuda.h).
  for (const CUmemLocationType where : {CU_MEM_LOCATION_TYPE_HOST, CU_MEM_LOCATION_TYPE_HOST_NUMA}) {
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = where;
    prop.location.id = 0;
    CUmemGenericAllocationHandle h = 0;
    ASSERT_EQ(cuMemCreate(&h, kCap, &prop, 0), CUDA_SUCCESS) << "the whole cap's size, on the host";
    CUdeviceptr range = 0;
    ASSERT_EQ(cuMemAddressReserve(&range, kCap, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemMap(range, kCap, 0, h, 0), CUDA_SUCCESS);
    EXPECT_EQ(mem_info().free, kCap - kContext) << "nothing charged to the device";
    ASSERT_EQ(cuMemUnmap(range, kCap), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAddressFree(range, kCap), CUDA_SUCCESS);
    ASSERT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  }
  CUmemAllocationProp current{};
  current.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  current.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemCreate(&h, kGranule, &current, 0), CUDA_ERROR_INVALID_VALUE) << "as cuda.h says";
}

// ---- children ----

int smi() {
  // As nvidia-smi --query-gpu=memory.total: NVML only, no CUDA.
  nvmlDevice_t device = nullptr;
  nvmlMemory_t memory{};
  if (nvmlInit_v2() != NVML_SUCCESS) return 1;
  const auto by_index =
      reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(dlsym(RTLD_DEFAULT, "nvmlDeviceGetHandleByIndex_v2"));
  if (by_index == nullptr || by_index(0, &device) != NVML_SUCCESS) return 1;
  if (nvmlDeviceGetMemoryInfo(device, &memory) != NVML_SUCCESS) return 1;
  std::printf("%llu\n", memory.total >> 20);
  nvmlShutdown();
  return 0;
}

int ollama() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  void* nvml = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr || nvml == nullptr) return 1;
  const auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(cuda, "cuInit"));
  const auto count = reinterpret_cast<CUresult (*)(int*)>(dlsym(cuda, "cuDeviceGetCount"));
  const auto get = reinterpret_cast<CUresult (*)(CUdevice*, int)>(dlsym(cuda, "cuDeviceGet"));
  const auto total_mem = reinterpret_cast<CUresult (*)(std::size_t*, CUdevice)>(dlsym(cuda, "cuDeviceTotalMem_v2"));
  int n = 0;
  CUdevice dev = 0;
  std::size_t total = 0;
  if (init(0) || count(&n) || n < 1 || get(&dev, 0) || total_mem(&total, dev)) return 1;
  std::printf("cuDeviceTotalMem_v2 %zu MiB\n", total >> 20);
  const auto nvml_init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(nvml, "nvmlInit_v2"));
  const auto by_index =
      reinterpret_cast<nvmlReturn_t (*)(unsigned, nvmlDevice_t*)>(dlsym(nvml, "nvmlDeviceGetHandleByIndex_v2"));
  const auto memory_info =
      reinterpret_cast<nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t*)>(dlsym(nvml, "nvmlDeviceGetMemoryInfo"));
  nvmlDevice_t device = nullptr;
  nvmlMemory_t memory{};
  if (nvml_init() || by_index(0, &device) || memory_info(device, &memory)) return 1;
  std::printf("nvmlDeviceGetMemoryInfo total %llu MiB, free %llu MiB\n", memory.total >> 20, memory.free >> 20);
  return 0;
}

int null_mem_info() {
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) || cuDeviceGet(&dev, 0) || cuDevicePrimaryCtxRetain(&ctx, dev) || cuCtxSetCurrent(ctx)) return 1;
  std::size_t f = 0, t = 0;
  std::printf("free null %d, total null %d, both null %d\n", cuMemGetInfo_v2(nullptr, &t), cuMemGetInfo_v2(&f, nullptr),
              cuMemGetInfo_v2(nullptr, nullptr));
  return 0;
}

int child_main(const std::string& mode) {
  if (mode == "smi") return smi();
  if (mode == "ollama") return ollama();
  if (mode == "null-mem-info") return null_mem_info();
  return 2;
}

}  // namespace

int main(int argc, char** argv) { return slice_test::shim_test_main(argc, argv, child_main); }
