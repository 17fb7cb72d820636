// The CUDA runtime under libslice on a real GPU: cudaMemGetInfo shows the cap, and each of the
// runtime's allocation paths is refused at it, never past it: cudaMalloc, cudaMallocAsync,
// cudaMallocManaged, cudaMallocPitch, cudaMallocArray, and a graph allocation node (a captured
// cudaMallocAsync, mapped at the graph's launch). Kernels still launch and run with room left.
// Then what servers size themselves by (issue 26): cudaGetDeviceProperties' totalGlobalMem is the
// cap; llama.cpp's VMM pool (ggml-cuda.cu, ggml_cuda_pool_vmm), a 32 GiB range grown by cuMemCreate
// and cuMemMap through the runtime's driver entry points until the driver says out-of-memory, at the
// cap; and a cooperative launch.
// Run with LD_PRELOAD=libslice.so and SLICE_MEMORY_LIMIT=<cap bytes>.
// Usage: runtime_cap CAP_BYTES CONTEXT_CHARGED(0|1) [--unsupported KEY,KEY...]
//   CONTEXT_CHARGED: whether libslice charges the context (NVML lists this process). Then its
//   overhead is reconciled from NVML figures up to a second old, so "everything given back" allows
//   64 MiB; otherwise it is exact.
//   --unsupported: paths the driver refuses here even without libslice (tests/gpu/run.sh probes
//   them with driver_cap --probe): "managed" leaves out cudaMallocManaged, with a line saying so.
#include <cuda.h>  // the driver's types, for its entry points fetched through the runtime
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr size_t kBlock = 256ull << 20;
unsigned long long g_cap = 0;
size_t g_reconcile_slack = 0;  // 64 MiB where the context is charged
int g_failures = 0;
std::string g_unsupported;  // ",managed,"

void expect(bool ok, const std::string& what) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

size_t free_now() {
  size_t f = 0, t = 0;
  cudaMemGetInfo(&f, &t);
  return f;
}

__global__ void add_one(int* p) { p[threadIdx.x] += 1; }

// A driver function as the runtime hands it out (cuGetProcAddress underneath: libslice's wrapper).
template <typename Fn>
Fn driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &found) != cudaSuccess) return nullptr;
  return reinterpret_cast<Fn>(fn);
}

// llama.cpp's VMM pool: a 32 GiB range, grown 64 MiB at a time until the driver refuses.
void vmm_pool() {
  const auto create = driver_entry<decltype(&cuMemCreate)>("cuMemCreate");
  const auto release = driver_entry<decltype(&cuMemRelease)>("cuMemRelease");
  const auto reserve = driver_entry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
  const auto address_free = driver_entry<decltype(&cuMemAddressFree)>("cuMemAddressFree");
  const auto map = driver_entry<decltype(&cuMemMap)>("cuMemMap");
  const auto unmap = driver_entry<decltype(&cuMemUnmap)>("cuMemUnmap");
  const auto set_access = driver_entry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
  if (!create || !release || !reserve || !address_free || !map || !unmap || !set_access) {
    expect(false, "the runtime handed out the VMM functions");
    return;
  }
  constexpr size_t kRange = 32ull << 30, kStep = 64ull << 20;
  const size_t free_before = free_now();
  CUdeviceptr base = 0;
  if (reserve(&base, kRange, 0, 0, 0) != CUDA_SUCCESS) {
    expect(false, "a 32 GiB range reserved");
    return;
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  std::vector<CUmemGenericAllocationHandle> handles;
  CUresult rc = CUDA_SUCCESS;
  while (handles.size() * kStep < kRange) {
    CUmemGenericAllocationHandle h = 0;
    if ((rc = create(&h, kStep, &prop, 0)) != CUDA_SUCCESS) break;
    const CUdeviceptr at = base + handles.size() * kStep;
    if (map(at, kStep, 0, h, 0) != CUDA_SUCCESS || set_access(at, kStep, &access, 1) != CUDA_SUCCESS) {
      release(h);
      rc = CUDA_ERROR_UNKNOWN;
      break;
    }
    handles.push_back(h);
  }
  const size_t grown = handles.size() * kStep;
  std::printf("llama.cpp VMM pool: grown to %zu MiB, then %d (free before %zu MiB)\n", grown >> 20, rc,
              free_before >> 20);
  expect(rc == CUDA_ERROR_OUT_OF_MEMORY, "the pool's growth ended with CUDA_ERROR_OUT_OF_MEMORY");
  expect(grown <= free_before + g_reconcile_slack && grown + kStep + g_reconcile_slack > free_before,
         "the pool grew to the room the cap left, not past it");
  for (size_t i = 0; i < handles.size(); ++i) {
    unmap(base + i * kStep, kStep);
    release(handles[i]);
  }
  address_free(base, kRange);
}

bool kernel_runs(int* d) {
  cudaMemset(d, 0, 32 * sizeof(int));
  add_one<<<1, 32>>>(d);
  int h[32] = {};
  return cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) == cudaSuccess && h[31] == 1;
}

void fill(const std::string& path, const std::function<cudaError_t(void**)>& alloc,
          const std::function<void(void*)>& release, size_t slack = 0) {
  const size_t before = free_now();
  std::vector<void*> held;
  cudaError_t last = cudaSuccess;
  while (held.size() * kBlock <= g_cap + kBlock) {
    void* p = nullptr;
    last = alloc(&p);
    if (last != cudaSuccess) break;
    held.push_back(p);
  }
  cudaGetLastError();  // clear the refusal
  std::printf("%s: %zu blocks of 256 MiB, then %s (free before %zu MiB)\n", path.c_str(), held.size(),
              cudaGetErrorName(last), before >> 20);
  expect(last == cudaErrorMemoryAllocation, path + ": refused with cudaErrorMemoryAllocation");
  expect(held.size() * kBlock <= before, path + ": never past the cap");
  expect((held.size() + 1) * (kBlock + slack) + g_reconcile_slack > before,
         path + ": not refused while a block still fitted");
  for (void* p : held) release(p);
  cudaDeviceSynchronize();
  const size_t after = free_now();
  expect(after + g_reconcile_slack >= before && after <= before + g_reconcile_slack,
         path + ": everything given back (free " + std::to_string(after >> 20) + " MiB, before " +
             std::to_string(before >> 20) + " MiB, allowed " + std::to_string(g_reconcile_slack >> 20) + " MiB)");
}

bool unsupported(const char* key) { return g_unsupported.find(std::string(",") + key + ",") != std::string::npos; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::strcmp(argv[3], "--unsupported") == 0)) {
    std::fprintf(stderr, "usage: runtime_cap CAP_BYTES CONTEXT_CHARGED(0|1) [--unsupported KEY,KEY...]\n");
    return 2;
  }
  g_cap = std::strtoull(argv[1], nullptr, 10);
  if (std::strcmp(argv[2], "1") == 0) g_reconcile_slack = 64ull << 20;
  if (argc == 5) g_unsupported = std::string(",") + argv[4] + ",";
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return std::puts("FAIL: cudaMemGetInfo"), 1;
  std::printf("cudaMemGetInfo: free %zu total %zu (cap %llu)\n", free_bytes, total, g_cap);
  expect(total == g_cap && free_bytes <= g_cap, "the runtime sees the cap");
  cudaDeviceProp props{};
  expect(cudaGetDeviceProperties(&props, 0) == cudaSuccess && props.totalGlobalMem == g_cap,
         "cudaGetDeviceProperties: totalGlobalMem is the cap (" + std::to_string(props.totalGlobalMem) + ")");
  {
    int* d = nullptr;
    void* args[] = {&d};
    const bool launched =
        cudaMalloc(&d, 4096) == cudaSuccess && cudaMemset(d, 0, 4096) == cudaSuccess &&
        cudaLaunchCooperativeKernel(reinterpret_cast<void*>(add_one), 1, 32, args, 0, 0) == cudaSuccess &&
        cudaDeviceSynchronize() == cudaSuccess;
    expect(launched, "a cooperative launch runs");
    cudaFree(d);
  }
  vmm_pool();

  // A kernel with most of the cap taken, but room left for what a launch needs.
  {
    std::vector<void*> taken;
    void* p = nullptr;
    while (free_now() > 768ull << 20 && cudaMalloc(&p, kBlock) == cudaSuccess) taken.push_back(p);
    int* d = nullptr;
    expect(cudaMalloc(&d, 4096) == cudaSuccess && kernel_runs(d), "a kernel runs beside most of the cap in use");
    cudaFree(d);
    for (void* q : taken) cudaFree(q);
  }
  fill(
      "cudaMalloc", [](void** p) { return cudaMalloc(p, kBlock); }, [](void* p) { cudaFree(p); });
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return std::puts("FAIL: no stream"), 1;
  cudaMemPool_t pool;
  cudaDeviceGetDefaultMemPool(&pool, 0);
  fill(
      "cudaMallocAsync", [&](void** p) { return cudaMallocAsync(p, kBlock, s); },
      [&](void* p) {
        cudaFreeAsync(p, s);
        cudaStreamSynchronize(s);
        cudaMemPoolTrimTo(pool, 0);
      });
  if (unsupported("managed"))
    std::puts("skip  cudaMallocManaged: managed memory is unsupported here even without libslice");
  else
    fill(
        "cudaMallocManaged", [](void** p) { return cudaMallocManaged(p, kBlock); }, [](void* p) { cudaFree(p); });
  fill(
      "cudaMallocPitch",
      [](void** p) {
        size_t pitch = 0;
        return cudaMallocPitch(p, &pitch, 1u << 20, 256);
      },
      [](void* p) { cudaFree(p); }, 64ull << 20);
  fill(
      "cudaMallocArray",
      [](void** p) {
        cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
        return cudaMallocArray(reinterpret_cast<cudaArray_t*>(p), &f, 16384, 4096);
      },
      [](void* p) { cudaFreeArray(static_cast<cudaArray_t>(p)); }, 64ull << 20);
  // A captured cudaMallocAsync: the graph's allocation node takes memory at its launch.
  struct Captured {
    cudaGraphExec_t exec = nullptr;
    void* ptr = nullptr;
  };
  fill(
      "graph allocation node",
      [&](void** out) {
        auto* c = new Captured();
        cudaGraph_t g = nullptr;
        // Without a capture, the cudaMallocAsync below would allocate for real.
        if (const cudaError_t began = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)) {
          std::printf("cudaStreamBeginCapture failed: %s\n", cudaGetErrorName(began));
          delete c;
          return began;
        }
        cudaError_t rc = cudaMallocAsync(&c->ptr, kBlock, s);
        const cudaError_t ended = cudaStreamEndCapture(s, &g);
        if (rc == cudaSuccess) rc = ended;
        if (rc == cudaSuccess) rc = cudaGraphInstantiate(&c->exec, g, 0);
        if (g) cudaGraphDestroy(g);
        if (rc == cudaSuccess) rc = cudaGraphLaunch(c->exec, s);
        if (rc == cudaSuccess) rc = cudaStreamSynchronize(s);
        if (rc != cudaSuccess) {
          if (c->exec) cudaGraphExecDestroy(c->exec);
          delete c;
          cudaDeviceGraphMemTrim(0);
          return rc;
        }
        *out = c;
        return cudaSuccess;
      },
      [&](void* p) {
        auto* c = static_cast<Captured*>(p);
        cudaFreeAsync(c->ptr, s);
        cudaStreamSynchronize(s);
        cudaGraphExecDestroy(c->exec);
        delete c;
        cudaDeviceGraphMemTrim(0);
      },
      2ull << 20);
  std::puts(g_failures == 0 ? "PASS" : "FAIL");
  return g_failures == 0 ? 0 : 1;
}
