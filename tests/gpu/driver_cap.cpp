// libslice against the real driver: every allocation path is filled until refused, must stop
// within one block of the cap (never past it), and must give everything back. Run under
// LD_PRELOAD=libslice.so with SLICE_MEMORY_LIMIT=<cap>; the cap in bytes is argv[1].
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

namespace {

unsigned long long g_cap = 0;
int g_failures = 0;
constexpr size_t kBlock = 256ull << 20;

void expect(bool ok, const char* what) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++g_failures;
}

size_t free_now() {
  size_t f = 0, t = 0;
  cuMemGetInfo(&f, &t);
  return f;
}

// Allocates blocks with `alloc` until it is refused; checks where it stopped; frees with `release`.
void fill(const char* path, const std::function<CUresult(void**)>& alloc, const std::function<void(void*)>& release) {
  const size_t before = free_now();
  std::vector<void*> held;
  CUresult last = CUDA_SUCCESS;
  while (held.size() * kBlock <= g_cap) {
    void* h = nullptr;
    last = alloc(&h);
    if (last != CUDA_SUCCESS) break;
    held.push_back(h);
  }
  std::printf("%s: %zu blocks of 256 MiB, then %d (free before %zu MiB)\n", path, held.size(), last, before >> 20);
  expect(last == CUDA_ERROR_OUT_OF_MEMORY, "refused with CUDA_ERROR_OUT_OF_MEMORY");
  expect(held.size() * kBlock <= before && (held.size() + 1) * kBlock > before, "stopped at the cap, not before");
  for (void* h : held) release(h);
  expect(free_now() == before, "everything given back");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  g_cap = std::strtoull(argv[1], nullptr, 10);
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return std::puts("FAIL: no context"), 1;
  size_t f = 0, t = 0, total_mem = 0;
  cuMemGetInfo(&f, &t);
  cuDeviceTotalMem(&total_mem, dev);
  std::printf("cuMemGetInfo: free %zu MiB total %zu MiB; cuDeviceTotalMem %zu MiB\n", f >> 20, t >> 20, total_mem >> 20);
  expect(t == g_cap && total_mem == g_cap, "total = the cap");
  expect(f < g_cap, "the context's own memory is charged");

  fill("cuMemAlloc", [](void** h) { return cuMemAlloc(reinterpret_cast<CUdeviceptr*>(h), kBlock); },
       [](void* h) { cuMemFree(reinterpret_cast<CUdeviceptr>(h)); });
  CUstream s = nullptr;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  CUmemoryPool pool = nullptr;
  cuDeviceGetDefaultMemPool(&pool, dev);
  fill("cuMemAllocAsync", [&](void** h) { return cuMemAllocAsync(reinterpret_cast<CUdeviceptr*>(h), kBlock, s); },
       [&](void* h) {
         cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(h), s);
         cuStreamSynchronize(s);
         cuMemPoolTrimTo(pool, 0);
       });
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  fill("cuMemCreate",
       [&](void** h) { return cuMemCreate(reinterpret_cast<CUmemGenericAllocationHandle*>(h), kBlock, &prop, 0); },
       [](void* h) { cuMemRelease(reinterpret_cast<CUmemGenericAllocationHandle>(h)); });
  fill("cuMemAllocManaged",
       [](void** h) { return cuMemAllocManaged(reinterpret_cast<CUdeviceptr*>(h), kBlock, CU_MEM_ATTACH_GLOBAL); },
       [](void* h) { cuMemFree(reinterpret_cast<CUdeviceptr>(h)); });
  std::puts(g_failures == 0 ? "PASS" : "FAIL");
  return g_failures == 0 ? 0 : 1;
}
