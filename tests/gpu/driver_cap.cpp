// libslice against the real driver: every allocation path of the driver API is filled in 256 MiB
// blocks until refused, and must be refused with CUDA_ERROR_OUT_OF_MEMORY at the cap (never past it,
// not a block before it), then give everything back. Paths: cuMemAlloc, cuMemAllocPitch, arrays,
// cuMemAllocAsync (the default pool), an explicit pool, VMM (cuMemCreate), managed memory, graph
// memory nodes, and CUDA IPC memory opened by a process of another tenant.
// Run under LD_PRELOAD=libslice.so with SLICE_MEMORY_LIMIT=<cap>.
// Usage: driver_cap CAP_BYTES CONTEXT_CHARGED(0|1)
//   CONTEXT_CHARGED: whether the context's own memory should show as charged (it is measured through
//   NVML, which cannot see this process in some sandboxes: tests/gpu/run.sh asks nvidia-smi first).
// Also runs on the simulated GPU (tests/gpu/run.sh --dry-run).
#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr size_t kBlock = 256ull << 20;
unsigned long long g_cap = 0;
int g_failures = 0;
CUdevice g_dev = 0;

void expect(bool ok, const std::string& what) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

size_t free_now() {
  size_t f = 0, t = 0;
  cuMemGetInfo(&f, &t);
  return f;
}

// Allocates blocks with `alloc` until it is refused; checks where it stopped; frees with `release`.
// `slack`: what one block may really take beyond 256 MiB (pitch and array padding, graph chunks).
void fill(const std::string& path, const std::function<CUresult(void**)>& alloc,
          const std::function<void(void*)>& release, size_t slack = 0) {
  const size_t before = free_now();
  std::vector<void*> held;
  CUresult last = CUDA_SUCCESS;
  while (held.size() * kBlock <= g_cap + kBlock) {
    void* h = nullptr;
    last = alloc(&h);
    if (last != CUDA_SUCCESS) break;
    held.push_back(h);
  }
  std::printf("%s: %zu blocks of 256 MiB, then CUresult %d (free before: %zu MiB)\n", path.c_str(), held.size(),
              static_cast<int>(last), before >> 20);
  expect(last == CUDA_ERROR_OUT_OF_MEMORY, path + ": refused with CUDA_ERROR_OUT_OF_MEMORY");
  expect(held.size() * kBlock <= before, path + ": never past the cap");
  expect((held.size() + 1) * (kBlock + slack) > before, path + ": not refused while a block still fitted");
  for (void* h : held) release(h);
  expect(free_now() == before, path + ": everything given back");
}

// The IPC child: opens the parent's handles (another tenant, a smaller cap) until refused.
int ipc_child(const char* file, unsigned long long cap) {
  CUcontext ctx = nullptr;
  if (cuInit(0) || cuDeviceGet(&g_dev, 0) || cuDevicePrimaryCtxRetain(&ctx, g_dev) || cuCtxSetCurrent(ctx)) return 2;
  const size_t before = free_now();
  std::ifstream in(file, std::ios::binary);
  CUipcMemHandle h;
  size_t opened = 0;
  CUresult last = CUDA_SUCCESS;
  std::vector<CUdeviceptr> open;
  while (in.read(reinterpret_cast<char*>(&h), sizeof h)) {
    CUdeviceptr p = 0;
    last = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (last != CUDA_SUCCESS) break;
    open.push_back(p);
    ++opened;
  }
  std::printf("ipc child: opened %zu blocks of 256 MiB under a cap of %llu MiB, then CUresult %d (free before %zu MiB)\n",
              opened, cap >> 20, static_cast<int>(last), before >> 20);
  const bool ok = last == CUDA_ERROR_OUT_OF_MEMORY && opened * kBlock <= before && (opened + 1) * kBlock > before;
  for (CUdeviceptr p : open) cuIpcCloseMemHandle(p);
  return ok && free_now() == before ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--ipc-child") == 0) return ipc_child(argv[2], std::strtoull(argv[3], nullptr, 10));
  if (argc != 3) return 2;
  g_cap = std::strtoull(argv[1], nullptr, 10);
  const bool context_charged = std::strcmp(argv[2], "1") == 0;
  CUcontext ctx = nullptr;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&g_dev, 0) != CUDA_SUCCESS ||
      cuDevicePrimaryCtxRetain(&ctx, g_dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
    return std::puts("FAIL: no context"), 1;
  size_t f = 0, t = 0, total_mem = 0;
  cuMemGetInfo(&f, &t);
  cuDeviceTotalMem(&total_mem, g_dev);
  std::printf("cuMemGetInfo: free %zu MiB total %zu MiB; cuDeviceTotalMem %zu MiB\n", f >> 20, t >> 20, total_mem >> 20);
  expect(t == g_cap && total_mem == g_cap, "total = the cap");
  if (context_charged) expect(f < g_cap, "the context's own memory is charged");
  else std::printf("note: the context's memory cannot be measured here (NVML does not list this process)\n");

  fill("cuMemAlloc", [](void** h) { return cuMemAlloc(reinterpret_cast<CUdeviceptr*>(h), kBlock); },
       [](void* h) { cuMemFree(reinterpret_cast<CUdeviceptr>(h)); });
  fill("cuMemAllocPitch",
       [](void** h) {
         size_t pitch = 0;
         return cuMemAllocPitch(reinterpret_cast<CUdeviceptr*>(h), &pitch, 1u << 20, 256, 4);
       },
       [](void* h) { cuMemFree(reinterpret_cast<CUdeviceptr>(h)); }, 64ull << 20);
  fill("cuArrayCreate",
       [](void** h) {
         CUDA_ARRAY_DESCRIPTOR d{};
         d.Width = 16384;
         d.Height = 4096;
         d.Format = CU_AD_FORMAT_FLOAT;
         d.NumChannels = 1;  // 16384 x 4096 x 4 bytes = 256 MiB
         return cuArrayCreate(reinterpret_cast<CUarray*>(h), &d);
       },
       [](void* h) { cuArrayDestroy(reinterpret_cast<CUarray>(h)); }, 64ull << 20);
  CUstream s = nullptr;
  cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
  CUmemoryPool pool = nullptr;
  cuDeviceGetDefaultMemPool(&pool, g_dev);
  fill("cuMemAllocAsync", [&](void** h) { return cuMemAllocAsync(reinterpret_cast<CUdeviceptr*>(h), kBlock, s); },
       [&](void* h) {
         cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(h), s);
         cuStreamSynchronize(s);
         cuMemPoolTrimTo(pool, 0);
       });
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = g_dev;
  CUmemoryPool own = nullptr;
  cuMemPoolCreate(&own, &props);
  fill("cuMemAllocFromPoolAsync",
       [&](void** h) { return cuMemAllocFromPoolAsync(reinterpret_cast<CUdeviceptr*>(h), kBlock, own, s); },
       [&](void* h) {
         cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(h), s);
         cuStreamSynchronize(s);
         cuMemPoolTrimTo(own, 0);
       });
  cuMemPoolDestroy(own);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = g_dev;
  fill("cuMemCreate",
       [&](void** h) { return cuMemCreate(reinterpret_cast<CUmemGenericAllocationHandle*>(h), kBlock, &prop, 0); },
       [](void* h) { cuMemRelease(reinterpret_cast<CUmemGenericAllocationHandle>(h)); });
  fill("cuMemAllocManaged",
       [](void** h) { return cuMemAllocManaged(reinterpret_cast<CUdeviceptr*>(h), kBlock, CU_MEM_ATTACH_GLOBAL); },
       [](void* h) { cuMemFree(reinterpret_cast<CUdeviceptr>(h)); });
  // Graph memory: a graph whose allocation node's memory stays live after its launch.
  struct GraphAlloc {
    CUgraph graph = nullptr;
    CUgraphExec exec = nullptr;
    CUdeviceptr ptr = 0;
  };
  fill("graph memory node",
       [&](void** h) {
         auto* g = new GraphAlloc();
         CUDA_MEM_ALLOC_NODE_PARAMS p{};
         p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
         p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
         p.poolProps.location.id = g_dev;
         p.bytesize = kBlock;
         CUgraphNode node = nullptr;
         CUresult rc = cuGraphCreate(&g->graph, 0);
         if (rc == CUDA_SUCCESS) rc = cuGraphAddMemAllocNode(&node, g->graph, nullptr, 0, &p);
         if (rc == CUDA_SUCCESS) rc = cuGraphInstantiateWithFlags(&g->exec, g->graph, 0);
         if (rc == CUDA_SUCCESS) rc = cuGraphLaunch(g->exec, s);
         if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(s);
         g->ptr = p.dptr;
         if (rc != CUDA_SUCCESS) {
           if (g->exec) cuGraphExecDestroy(g->exec);
           if (g->graph) cuGraphDestroy(g->graph);
           delete g;
           cuDeviceGraphMemTrim(g_dev);
           return rc;
         }
         *h = g;
         return CUDA_SUCCESS;
       },
       [&](void* h) {
         auto* g = static_cast<GraphAlloc*>(h);
         cuMemFreeAsync(g->ptr, s);
         cuStreamSynchronize(s);
         cuGraphExecDestroy(g->exec);
         cuGraphDestroy(g->graph);
         delete g;
         cuDeviceGraphMemTrim(g_dev);
       }, 2ull << 20);
  // CUDA IPC: this process exports blocks; a process of another tenant with a 1 GiB cap opens them
  // and is refused at its own cap (the memory is new to that tenant).
  std::vector<CUdeviceptr> exported;
  const std::string file = std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") + "/driver_cap_ipc." +
                           std::to_string(getpid());
  {
    std::ofstream out(file, std::ios::binary);
    for (int i = 0; i < 6; ++i) {
      CUdeviceptr p = 0;
      CUipcMemHandle h;
      if (cuMemAlloc(&p, kBlock) != CUDA_SUCCESS || cuIpcGetMemHandle(&h, p) != CUDA_SUCCESS) break;
      exported.push_back(p);
      out.write(reinterpret_cast<const char*>(&h), sizeof h);
    }
  }
  const unsigned long long child_cap = 1ull << 30;
  const std::string command = "SLICE_TENANT=driver-cap-ipc-peer SLICE_MEMORY_LIMIT=" + std::to_string(child_cap) +
                              " '/proc/" + std::to_string(getpid()) + "/exe' --ipc-child '" + file + "' " +
                              std::to_string(child_cap);
  expect(exported.size() == 6, "IPC: six blocks exported");
  const int child = std::system(command.c_str());
  expect(WIFEXITED(child) && WEXITSTATUS(child) == 0, "IPC: another tenant opening them is refused at its own cap");
  std::remove(file.c_str());
  for (CUdeviceptr p : exported) cuMemFree(p);
  std::puts(g_failures == 0 ? "PASS" : "FAIL");
  return g_failures == 0 ? 0 : 1;
}
