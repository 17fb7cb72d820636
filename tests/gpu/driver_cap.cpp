// libslice against the real driver: every allocation path of the driver API is filled in 256 MiB
// blocks until refused, and must be refused with CUDA_ERROR_OUT_OF_MEMORY at the cap (never past it,
// not a block before it), then give everything back. Paths: cuMemAlloc, cuMemAllocPitch, arrays,
// cuMemAllocAsync (the default pool), an explicit pool, VMM (cuMemCreate), managed memory, graph
// memory nodes, and CUDA IPC memory opened by a process of another tenant.
// Usage:
//   driver_cap CAP_BYTES CONTEXT_CHARGED(0|1) [--unsupported KEY,KEY...]
//       under LD_PRELOAD=libslice.so with the cap set (SLICE_MEMORY_LIMIT or a per-GPU variable).
//       CONTEXT_CHARGED: whether the context's own memory should show as charged (it is measured
//       through NVML, which cannot see this process in some sandboxes: tests/gpu/run.sh asks
//       nvidia-smi first). Where it is, libslice reconciles that overhead from NVML figures up to a
//       second old, so "everything given back" allows 64 MiB; otherwise it is exact.
//       --unsupported: paths (keys below) the driver refuses here without libslice: each is left
//       out with a line saying so, not failed.
//   driver_cap --probe
//       without libslice: tries each path once (one block, given back; IPC opened by a child) and
//       prints "probe KEY: ok" or "probe KEY: unsupported (CUresult N)", then
//       "unsupported=KEY,KEY" (empty when every path works). Exit 0 unless there is no context.
// Keys: alloc pitch array async pool vmm managed graph ipc.
// Also runs on the simulated GPU (tests/gpu/run.sh --dry-run).
#include <cuda.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

extern char** environ;

namespace {

constexpr size_t kBlock = 256ull << 20;
constexpr size_t kReconcileSlack = 64ull << 20;
unsigned long long g_cap = 0;
size_t g_reconcile_slack = 0;
int g_failures = 0;
CUdevice g_dev = 0;
CUstream g_stream = nullptr;
CUmemoryPool g_default_pool = nullptr, g_own_pool = nullptr;
CUresult g_own_pool_rc = CUDA_SUCCESS;

void expect(bool ok, const std::string& what) {
  std::printf("%s  %s\n", ok ? "ok  " : "FAIL", what.c_str());
  if (!ok) ++g_failures;
}

size_t free_now() {
  size_t f = 0, t = 0;
  cuMemGetInfo(&f, &t);
  return f;
}

bool context() {
  CUcontext ctx = nullptr;
  return cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&g_dev, 0) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(&ctx, g_dev) == CUDA_SUCCESS && cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

// One allocation path: `alloc` takes one block (a handle in *h), `release` gives it back. `slack`:
// what one block may really take beyond 256 MiB (pitch and array padding, graph chunks).
struct Path {
  const char* key;
  const char* name;
  std::function<CUresult(void**)> alloc;
  std::function<void(void*)> release;
  size_t slack = 0;
};

struct GraphAlloc {
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CUdeviceptr ptr = 0;
};

std::vector<Path> paths() {
  std::vector<Path> all;
  all.push_back({"alloc", "cuMemAlloc", [](void** h) { return cuMemAlloc(reinterpret_cast<CUdeviceptr*>(h), kBlock); },
                 [](void* h) { cuMemFree(reinterpret_cast<CUdeviceptr>(h)); }});
  all.push_back({"pitch", "cuMemAllocPitch",
                 [](void** h) {
                   size_t pitch = 0;
                   return cuMemAllocPitch(reinterpret_cast<CUdeviceptr*>(h), &pitch, 1u << 20, 256, 4);
                 },
                 [](void* h) { cuMemFree(reinterpret_cast<CUdeviceptr>(h)); }, 64ull << 20});
  all.push_back({"array", "cuArrayCreate",
                 [](void** h) {
                   CUDA_ARRAY_DESCRIPTOR d{};
                   d.Width = 16384;
                   d.Height = 4096;
                   d.Format = CU_AD_FORMAT_FLOAT;
                   d.NumChannels = 1;  // 16384 x 4096 x 4 bytes = 256 MiB
                   return cuArrayCreate(reinterpret_cast<CUarray*>(h), &d);
                 },
                 [](void* h) { cuArrayDestroy(reinterpret_cast<CUarray>(h)); }, 64ull << 20});
  all.push_back({"async", "cuMemAllocAsync",
                 [](void** h) { return cuMemAllocAsync(reinterpret_cast<CUdeviceptr*>(h), kBlock, g_stream); },
                 [](void* h) {
                   cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(h), g_stream);
                   cuStreamSynchronize(g_stream);
                   cuMemPoolTrimTo(g_default_pool, 0);
                 }});
  all.push_back({"pool", "cuMemAllocFromPoolAsync",
                 [](void** h) {
                   if (g_own_pool_rc != CUDA_SUCCESS) return g_own_pool_rc;
                   return cuMemAllocFromPoolAsync(reinterpret_cast<CUdeviceptr*>(h), kBlock, g_own_pool, g_stream);
                 },
                 [](void* h) {
                   cuMemFreeAsync(reinterpret_cast<CUdeviceptr>(h), g_stream);
                   cuStreamSynchronize(g_stream);
                   cuMemPoolTrimTo(g_own_pool, 0);
                 }});
  all.push_back({"vmm", "cuMemCreate",
                 [](void** h) {
                   CUmemAllocationProp prop{};
                   prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
                   prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
                   prop.location.id = g_dev;
                   return cuMemCreate(reinterpret_cast<CUmemGenericAllocationHandle*>(h), kBlock, &prop, 0);
                 },
                 [](void* h) { cuMemRelease(reinterpret_cast<CUmemGenericAllocationHandle>(h)); }});
  all.push_back(
      {"managed", "cuMemAllocManaged",
       [](void** h) { return cuMemAllocManaged(reinterpret_cast<CUdeviceptr*>(h), kBlock, CU_MEM_ATTACH_GLOBAL); },
       [](void* h) { cuMemFree(reinterpret_cast<CUdeviceptr>(h)); }});
  // Graph memory: a graph whose allocation node's memory stays live after its launch.
  all.push_back({"graph", "graph memory node",
                 [](void** h) {
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
                   if (rc == CUDA_SUCCESS) rc = cuGraphLaunch(g->exec, g_stream);
                   if (rc == CUDA_SUCCESS) rc = cuStreamSynchronize(g_stream);
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
                 [](void* h) {
                   auto* g = static_cast<GraphAlloc*>(h);
                   cuMemFreeAsync(g->ptr, g_stream);
                   cuStreamSynchronize(g_stream);
                   cuGraphExecDestroy(g->exec);
                   cuGraphDestroy(g->graph);
                   delete g;
                   cuDeviceGraphMemTrim(g_dev);
                 },
                 2ull << 20});
  return all;
}

// Allocates blocks until refused; checks where it stopped; gives them back.
void fill(const Path& path) {
  const std::string name = path.name;
  const size_t before = free_now();
  std::vector<void*> held;
  CUresult last = CUDA_SUCCESS;
  while (held.size() * kBlock <= g_cap + kBlock) {
    void* h = nullptr;
    last = path.alloc(&h);
    if (last != CUDA_SUCCESS) break;
    held.push_back(h);
  }
  std::printf("%s: %zu blocks of 256 MiB, then CUresult %d (free before: %zu MiB)\n", name.c_str(), held.size(),
              static_cast<int>(last), before >> 20);
  expect(last == CUDA_ERROR_OUT_OF_MEMORY, name + ": refused with CUDA_ERROR_OUT_OF_MEMORY");
  expect(held.size() * kBlock <= before, name + ": never past the cap");
  expect((held.size() + 1) * (kBlock + path.slack) + g_reconcile_slack > before,
         name + ": not refused while a block still fitted");
  for (void* h : held) path.release(h);
  const size_t after = free_now();
  expect(after + g_reconcile_slack >= before && after <= before + g_reconcile_slack,
         name + ": everything given back (free " + std::to_string(after >> 20) + " MiB, before " +
             std::to_string(before >> 20) + " MiB, allowed " + std::to_string(g_reconcile_slack >> 20) + " MiB)");
}

// Starts this program again with `args`, and `env` as its whole environment; its exit status.
int run_self(const std::vector<std::string>& args, const std::vector<std::string>& env) {
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  std::vector<char*> argv{exe}, envp;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, exe, nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<std::string> environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

std::string handle_file() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/driver_cap_ipc." + std::to_string(getpid());
}

// The IPC child: opens the parent's handles (another tenant, a smaller cap) until refused.
int ipc_child(const char* file, unsigned long long cap, bool charged) {
  if (!context()) return 2;
  const size_t slack = charged ? kReconcileSlack : 0;
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
  std::printf(
      "ipc child: opened %zu blocks of 256 MiB under a cap of %llu MiB, then CUresult %d (free before %zu MiB)\n",
      opened, cap >> 20, static_cast<int>(last), before >> 20);
  bool ok = last == CUDA_ERROR_OUT_OF_MEMORY && opened * kBlock <= before && (opened + 1) * kBlock + slack > before;
  for (CUdeviceptr p : open) cuIpcCloseMemHandle(p);
  const size_t after = free_now();
  std::printf("ipc child: free %zu MiB after closing them\n", after >> 20);
  ok = ok && after + slack >= before && after <= before + slack;
  return ok ? 0 : 1;
}

// The probe's IPC child: can this process open the handle at all (without libslice)?
int ipc_probe_child(const char* file) {
  if (!context()) return 2;
  std::ifstream in(file, std::ios::binary);
  CUipcMemHandle h;
  if (!in.read(reinterpret_cast<char*>(&h), sizeof h)) return 2;
  CUdeviceptr p = 0;
  const CUresult rc = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  std::printf("ipc probe child: cuIpcOpenMemHandle -> CUresult %d\n", static_cast<int>(rc));
  if (rc == CUDA_SUCCESS) cuIpcCloseMemHandle(p);
  return rc == CUDA_SUCCESS ? 0 : 1;
}

// Exports six blocks; a process of another tenant with a 1 GiB cap opens them and must be refused at
// its own cap (the memory is new to that tenant). The child gets this environment less every cap
// variable (SLICE_MEMORY_LIMIT, _<n>, _GPU_<uuid>: a per-GPU one would win over its own) and tenant.
void ipc(bool charged) {
  std::vector<CUdeviceptr> allocated;
  int exported = 0;
  const std::string file = handle_file();
  {
    std::ofstream out(file, std::ios::binary);
    for (int i = 0; i < 6; ++i) {
      CUdeviceptr p = 0;
      CUipcMemHandle h;
      if (cuMemAlloc(&p, kBlock) != CUDA_SUCCESS) break;
      allocated.push_back(p);
      if (cuIpcGetMemHandle(&h, p) != CUDA_SUCCESS) break;
      out.write(reinterpret_cast<const char*>(&h), sizeof h);
      ++exported;
    }
  }
  expect(exported == 6, "IPC: six blocks exported (" + std::to_string(exported) + ")");
  const unsigned long long child_cap = 1ull << 30;
  std::vector<std::string> env;
  for (const std::string& e : environment()) {
    if (e.rfind("SLICE_MEMORY_LIMIT", 0) == 0 || e.rfind("SLICE_TENANT=", 0) == 0) continue;
    env.push_back(e);
  }
  env.push_back("SLICE_TENANT=driver-cap-ipc-peer");
  env.push_back("SLICE_MEMORY_LIMIT=" + std::to_string(child_cap));
  std::fflush(stdout);
  const int child = run_self({"--ipc-child", file, std::to_string(child_cap), charged ? "1" : "0"}, env);
  expect(child == 0,
         "IPC: another tenant opening them is refused at its own cap (child exit " + std::to_string(child) + ")");
  std::remove(file.c_str());
  for (CUdeviceptr p : allocated) cuMemFree(p);
}

int probe() {
  std::string unsupported;
  auto note = [&](const char* key, CUresult rc) {
    if (rc == CUDA_SUCCESS || rc == CUDA_ERROR_OUT_OF_MEMORY) {
      std::printf("probe %s: ok%s\n", key, rc == CUDA_SUCCESS ? "" : " (out of memory: taken as supported)");
      return;
    }
    std::printf("probe %s: unsupported (CUresult %d)\n", key, static_cast<int>(rc));
    unsupported += (unsupported.empty() ? "" : ",") + std::string(key);
  };
  for (const Path& p : paths()) {
    void* h = nullptr;
    const CUresult rc = p.alloc(&h);
    if (rc == CUDA_SUCCESS) p.release(h);
    note(p.key, rc);
  }
  // IPC: a 2 MiB block exported here, opened by a child.
  CUdeviceptr p = 0;
  CUipcMemHandle h;
  CUresult rc = cuMemAlloc(&p, 2u << 20);
  if (rc == CUDA_SUCCESS) rc = cuIpcGetMemHandle(&h, p);
  if (rc == CUDA_SUCCESS) {
    const std::string file = handle_file();
    std::ofstream(file, std::ios::binary).write(reinterpret_cast<const char*>(&h), sizeof h);
    std::fflush(stdout);
    const int child = run_self({"--ipc-probe-child", file}, environment());
    std::remove(file.c_str());
    if (child != 0) rc = CUDA_ERROR_NOT_SUPPORTED;
  }
  if (p != 0) cuMemFree(p);
  note("ipc", rc);
  std::printf("unsupported=%s\n", unsupported.c_str());
  return 0;
}

bool listed(const std::string& list, const char* key) {
  return (std::string(",") + list + ",").find(std::string(",") + key + ",") != std::string::npos;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::strcmp(argv[1], "--ipc-child") == 0)
    return ipc_child(argv[2], std::strtoull(argv[3], nullptr, 10), std::strcmp(argv[4], "1") == 0);
  if (argc == 3 && std::strcmp(argv[1], "--ipc-probe-child") == 0) return ipc_probe_child(argv[2]);
  const bool probing = argc == 2 && std::strcmp(argv[1], "--probe") == 0;
  if (!probing && argc != 3 && !(argc == 5 && std::strcmp(argv[3], "--unsupported") == 0)) {
    std::fprintf(stderr,
                 "usage: driver_cap CAP_BYTES CONTEXT_CHARGED(0|1) [--unsupported KEY,KEY...] | driver_cap --probe\n");
    return 2;
  }
  if (!context()) return std::puts("FAIL: no context"), 1;
  if (cuStreamCreate(&g_stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return std::puts("FAIL: no stream"), 1;
  cuDeviceGetDefaultMemPool(&g_default_pool, g_dev);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = g_dev;
  g_own_pool_rc = cuMemPoolCreate(&g_own_pool, &props);
  if (probing) {
    const int rc = probe();
    if (g_own_pool != nullptr) cuMemPoolDestroy(g_own_pool);
    return rc;
  }

  g_cap = std::strtoull(argv[1], nullptr, 10);
  const bool context_charged = std::strcmp(argv[2], "1") == 0;
  if (context_charged) g_reconcile_slack = kReconcileSlack;
  const std::string unsupported = argc == 5 ? argv[4] : "";
  size_t f = 0, t = 0, total_mem = 0;
  cuMemGetInfo(&f, &t);
  cuDeviceTotalMem(&total_mem, g_dev);
  std::printf("cuMemGetInfo: free %zu MiB total %zu MiB; cuDeviceTotalMem %zu MiB\n", f >> 20, t >> 20,
              total_mem >> 20);
  expect(t == g_cap && total_mem == g_cap, "total = the cap");
  if (context_charged)
    expect(f < g_cap, "the context's own memory is charged");
  else
    std::printf("note: the context's memory cannot be measured here (NVML does not list this process)\n");

  for (const Path& p : paths()) {
    if (listed(unsupported, p.key))
      std::printf("skip  %s: unsupported here even without libslice\n", p.name);
    else
      fill(p);
  }
  if (g_own_pool != nullptr) cuMemPoolDestroy(g_own_pool);
  if (listed(unsupported, "ipc"))
    std::printf("skip  CUDA IPC: unsupported here even without libslice\n");
  else
    ipc(context_charged);
  std::puts(g_failures == 0 ? "PASS" : "FAIL");
  return g_failures == 0 ? 0 : 1;
}
