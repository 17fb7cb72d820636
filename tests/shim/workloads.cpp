#include "workloads.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "nvml_api.h"
#include "shim_test_support.h"

extern "C" {
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device);
}

namespace slice_test {
namespace {

constexpr std::size_t kChunk = 2 * kMiB;
constexpr unsigned long long kUs = 1000;

std::size_t round_up(std::size_t n, std::size_t to) { return (n + to - 1) / to * to; }

void emit(const std::string& key, unsigned long long value) { std::printf("%s=%llu\n", key.c_str(), value); }

// This process's device memory as the driver counts it (NVML's per-process figure).
std::uint64_t device_holds() {
  static const bool ready = nvmlInit_v2() == NVML_SUCCESS;
  nvmlDevice_t device = nullptr;
  nvmlProcessInfo_t infos[64];
  unsigned count = 64;
  if (!ready || nvmlDeviceGetHandleByIndex_v2(0, &device) != NVML_SUCCESS ||
      nvmlDeviceGetComputeRunningProcesses_v3(device, &count, infos) != NVML_SUCCESS)
    return 0;
  for (unsigned i = 0; i < count; ++i)
    if (infos[i].pid == static_cast<unsigned>(getpid())) return infos[i].usedGpuMemory;
  return 0;
}

struct Gpu {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUfunction spin = nullptr;
  bool ok = false;
  Gpu() {
    ok = cuInit(0) == CUDA_SUCCESS && cuDeviceGet(&device, 0) == CUDA_SUCCESS &&
         cuDevicePrimaryCtxRetain(&context, device) == CUDA_SUCCESS && cuCtxSetCurrent(context) == CUDA_SUCCESS &&
         (spin = spin_kernel()) != nullptr;
  }
  CUresult kernel(CUstream s, unsigned long long ns = 50 * kUs) const { return launch_spin(spin, ns, s); }
  CUmemAllocationProp prop(bool shareable = false) const {
    CUmemAllocationProp p{};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    if (shareable) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
  }
  // Maps a new physical allocation of `size` at `va` (read-write): false when it cannot be had.
  bool map(CUdeviceptr va, std::size_t size, CUmemGenericAllocationHandle* handle, bool shareable = false) const {
    const CUmemAllocationProp p = prop(shareable);
    if (cuMemCreate(handle, size, &p, 0) != CUDA_SUCCESS) return false;
    CUmemAccessDesc access{};
    access.location = p.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (cuMemMap(va, size, 0, *handle, 0) == CUDA_SUCCESS && cuMemSetAccess(va, size, &access, 1) == CUDA_SUCCESS)
      return true;
    cuMemUnmap(va, size);
    cuMemRelease(*handle);
    return false;
  }
};

// ---- a caching allocator ----

class CachingAllocator {
 public:
  CachingAllocator(const Gpu& gpu, bool expandable) : gpu_(gpu), expandable_(expandable) {
    if (expandable_) cuMemAddressReserve(&range_, kRange, 0, 0, 0);
  }
  ~CachingAllocator() {
    empty_cache();
    if (expandable_) cuMemAddressFree(range_, kRange);
  }

  // As the allocator does: from the cache, else a new segment; out of memory: the cache is
  // released and the request tried once more.
  bool allocate(std::size_t bytes, CUdeviceptr* out) {
    bytes = round_up(bytes, 512);
    if (take_cached(bytes, out)) return true;
    if (grow(bytes) && take_cached(bytes, out)) return true;
    empty_cache();
    ++cache_flushes_;
    return grow(bytes) && take_cached(bytes, out);
  }
  void release(CUdeviceptr p) {
    for (Block& b : blocks_)
      if (b.ptr == p) b.free = true;
    coalesce();
  }
  // Gives the driver back what no block uses (torch.cuda.empty_cache()).
  void empty_cache() {
    if (expandable_) {
      while (!chunks_.empty() && !blocks_.empty() && blocks_.back().free && blocks_.back().ptr <= chunks_.back().va &&
             chunks_.back().va + chunks_.back().size <= end_of(blocks_.back())) {
        const Chunk c = chunks_.back();
        chunks_.pop_back();
        cuMemUnmap(c.va, c.size);
        cuMemRelease(c.handle);
        mapped_ -= c.size;
        blocks_.back().size -= c.size;
        if (blocks_.back().size == 0) blocks_.pop_back();
      }
      return;
    }
    std::map<CUdeviceptr, bool> segment_free;  // segment base -> all its blocks free
    for (const Block& b : blocks_) {
      auto [it, fresh] = segment_free.try_emplace(b.segment, true);
      it->second = it->second && b.free;
    }
    for (const auto& [base, free] : segment_free) {
      if (!free) continue;
      cuMemFree_v2(base);
      std::erase_if(blocks_, [&](const Block& b) { return b.segment == base; });
    }
  }
  int cache_flushes() const { return cache_flushes_; }

 private:
  static constexpr std::size_t kRange = 64ull << 30;
  struct Block {
    CUdeviceptr segment;  // the cuMemAlloc it lies in (expandable: the range)
    CUdeviceptr ptr;
    std::size_t size;
    bool free;
  };
  struct Chunk {
    CUdeviceptr va;
    std::size_t size;
    CUmemGenericAllocationHandle handle;
  };
  static CUdeviceptr end_of(const Block& b) { return b.ptr + b.size; }

  bool take_cached(std::size_t bytes, CUdeviceptr* out) {
    Block* best = nullptr;
    for (Block& b : blocks_)
      if (b.free && b.size >= bytes && (!best || b.size < best->size)) best = &b;
    if (!best) return false;
    if (best->size - bytes >= kMiB) {  // split: the rest stays cached
      Block rest{best->segment, best->ptr + bytes, best->size - bytes, true};
      best->size = bytes;
      blocks_.insert(blocks_.begin() + (best - blocks_.data()) + 1, rest);
      best = nullptr;
      for (Block& b : blocks_)
        if (b.ptr + b.size == rest.ptr) best = &b;
    }
    best->free = false;
    *out = best->ptr;
    return true;
  }
  bool grow(std::size_t bytes) {
    if (!expandable_) {
      const std::size_t size = bytes < kMiB ? 20 * kMiB : round_up(bytes, kChunk);
      CUdeviceptr base = 0;
      if (cuMemAlloc_v2(&base, size) != CUDA_SUCCESS) return false;
      blocks_.push_back({base, base, size, true});
      return true;
    }
    const std::size_t tail = !blocks_.empty() && blocks_.back().free ? blocks_.back().size : 0;
    const std::size_t size = round_up(bytes - std::min(bytes, tail), kChunk);
    Chunk c{range_ + mapped_, size, 0};
    if (mapped_ + size > kRange || !gpu_.map(c.va, size, &c.handle)) return false;
    chunks_.push_back(c);
    mapped_ += size;
    if (tail != 0)
      blocks_.back().size += size;
    else
      blocks_.push_back({range_, c.va, size, true});
    return true;
  }
  void coalesce() {
    for (std::size_t i = 0; i + 1 < blocks_.size();) {
      Block& a = blocks_[i];
      const Block& b = blocks_[i + 1];
      if (a.free && b.free && a.segment == b.segment && end_of(a) == b.ptr) {
        a.size += b.size;
        blocks_.erase(blocks_.begin() + static_cast<long>(i) + 1);
      } else {
        ++i;
      }
    }
  }

  const Gpu& gpu_;
  bool expandable_;
  std::vector<Block> blocks_;  // in address order within each segment
  std::vector<Chunk> chunks_;  // expandable: the range's mapped chunks, in order
  CUdeviceptr range_ = 0;
  std::size_t mapped_ = 0;
  int cache_flushes_ = 0;
};

int caching_allocator() {
  Gpu gpu;
  if (!gpu.ok) return 1;
  const bool expandable = std::getenv("EXPANDABLE") != nullptr;
  CUstream stream = nullptr;
  cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING);
  std::uint64_t peak = 0;
  int max_batch = 0, recovered = 0;
  {
    CachingAllocator alloc(gpu, expandable);
    // One training step: three activations of 48 MiB per sample and a 16 MiB temporary each.
    auto step = [&](int batch) {
      std::vector<CUdeviceptr> held;
      bool ok = true;
      for (int t = 0; t < 3 && ok; ++t) {
        CUdeviceptr p = 0;
        ok = alloc.allocate(static_cast<std::size_t>(batch) * 48 * kMiB, &p);
        if (ok) held.push_back(p);
      }
      for (int t = 0; t < batch && ok; ++t) {
        CUdeviceptr p = 0;
        ok = alloc.allocate(16 * kMiB, &p);
        if (ok) alloc.release(p);
      }
      if (ok) ok = gpu.kernel(stream) == CUDA_SUCCESS && cuStreamSynchronize(stream) == CUDA_SUCCESS;
      peak = std::max(peak, device_holds());
      for (CUdeviceptr p : held) alloc.release(p);
      return ok;
    };
    int batch = 1;
    for (; batch <= 64 && step(batch); ++batch) max_batch = batch;
    if (batch <= 64) {  // out of memory: back off, as a training script catching OutOfMemoryError does
      alloc.empty_cache();
      recovered = step(max_batch) && step(max_batch) ? 1 : 0;
    }
    emit("cache_flushes", static_cast<unsigned long long>(alloc.cache_flushes()));
  }
  emit("max_batch", static_cast<unsigned long long>(max_batch));
  emit("out_of_memory", max_batch < 64 ? 1 : 0);
  emit("recovered", static_cast<unsigned long long>(recovered));
  emit("peak_device_bytes", peak);
  emit("left_bytes", device_holds());
  cuStreamDestroy_v2(stream);
  return 0;
}

// ---- vLLM ----

int vllm() {
  Gpu gpu;
  if (!gpu.ok) return 1;
  std::size_t free = 0, total = 0;
  cuMemGetInfo_v2(&free, &total);
  CUdeviceptr weights = 0, activations = 0;
  if (cuMemAlloc_v2(&weights, round_up(total / 5, kChunk))) return 1;       // the model: 20% of what it sees
  if (cuMemAlloc_v2(&activations, round_up(total / 10, kChunk))) return 1;  // the profiling run's peak
  cuMemFree_v2(activations);
  cuMemGetInfo_v2(&free, &total);
  const std::size_t in_use = total - free;
  // gpu_memory_utilization 0.9: the KV cache takes what brings the use to 90% of the total.
  const std::size_t kv = (total / 10 * 9 - in_use) / (64 * kMiB) * (64 * kMiB);
  CUdeviceptr va = 0;
  if (cuMemAddressReserve(&va, kv, 0, 0, 0)) return 1;
  std::vector<CUmemGenericAllocationHandle> chunks(kv / (64 * kMiB));
  for (std::size_t i = 0; i < chunks.size(); ++i)
    if (!gpu.map(va + i * 64 * kMiB, 64 * kMiB, &chunks[i])) return 1;
  emit("total_seen", total);
  emit("kv_chunks", chunks.size());
  emit("kv_percent_of_total", (in_use + kv) * 100 / total);
  emit("device_bytes_after_kv", device_holds());

  // Decode graphs for six batch sizes, captured on two threads (thread-local mode: one thread's
  // synchronisation does not break the other's capture), each after a warm-up run.
  struct Captured {
    CUgraphExec exec = nullptr;
    CUstream stream = nullptr;
  };
  std::vector<Captured> graphs(6);
  std::barrier captured(2);
  auto capture = [&](int first) {
    cuCtxSetCurrent(gpu.context);
    for (int i = first; i < 6; i += 2) {
      const int batch = 1 << i;
      CUstream s = nullptr;
      cuStreamCreate(&s, CU_STREAM_NON_BLOCKING);
      for (int k = 0; k < batch; ++k) gpu.kernel(s, 20 * kUs);  // warm-up
      cuStreamSynchronize(s);
      cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
      for (int k = 0; k < batch; ++k) gpu.kernel(s, 20 * kUs);
      CUgraph g = nullptr;
      if (cuStreamEndCapture(s, &g) == CUDA_SUCCESS &&
          cuGraphInstantiateWithFlags(&graphs[i].exec, g, 0) == CUDA_SUCCESS)
        graphs[i].stream = s;
      if (g) cuGraphDestroy(g);
    }
    captured.arrive_and_wait();
  };
  std::thread a(capture, 0), b(capture, 1);
  a.join(), b.join();
  int ok = 0, replays = 0;
  for (Captured& g : graphs) {
    if (!g.exec) continue;
    ++ok;
    for (int r = 0; r < 3; ++r) replays += cuGraphLaunch(g.exec, g.stream) == CUDA_SUCCESS;
    cuStreamSynchronize(g.stream);
    cuGraphExecDestroy(g.exec);
    cuStreamDestroy_v2(g.stream);
  }
  emit("graphs_captured", static_cast<unsigned long long>(ok));
  emit("graph_replays", static_cast<unsigned long long>(replays));

  // Sleep mode: the KV cache is given back; waking maps it again.
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    cuMemUnmap(va + i * 64 * kMiB, 64 * kMiB);
    cuMemRelease(chunks[i]);
  }
  const std::uint64_t asleep = device_holds();
  bool woke = true;
  for (std::size_t i = 0; i < chunks.size(); ++i) woke = woke && gpu.map(va + i * 64 * kMiB, 64 * kMiB, &chunks[i]);
  emit("asleep_bytes", asleep);
  emit("woke", woke ? 1 : 0);
  emit("awake_bytes", device_holds());
  for (std::size_t i = 0; woke && i < chunks.size(); ++i) {
    cuMemUnmap(va + i * 64 * kMiB, 64 * kMiB);
    cuMemRelease(chunks[i]);
  }
  cuMemAddressFree(va, kv);
  cuMemFree_v2(weights);
  return 0;
}

// ---- cudaMallocAsync-style pools ----

int async_pools() {
  Gpu gpu;
  if (!gpu.ok) return 1;
  CUmemoryPool pool = nullptr;
  cuDeviceGetDefaultMemPool(&pool, gpu.device);
  cuuint64_t keep = ~0ull;
  cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
  CUstream s[2] = {};
  cuStreamCreate(&s[0], CU_STREAM_NON_BLOCKING);
  cuStreamCreate(&s[1], CU_STREAM_NON_BLOCKING);
  int served = 0;
  for (int i = 0; i < 40; ++i) {
    CUdeviceptr p = 0;
    const std::size_t size = (64 + 64 * static_cast<std::size_t>(i % 4)) * kMiB;
    if (cuMemAllocAsync(&p, size, s[i % 2]) != CUDA_SUCCESS) continue;
    gpu.kernel(s[i % 2]);
    cuMemFreeAsync(p, s[i % 2]);
    ++served;
  }
  cuStreamSynchronize(s[0]);
  cuStreamSynchronize(s[1]);
  emit("served", static_cast<unsigned long long>(served));
  // A captured graph that allocates and frees inside itself.
  cuStreamBeginCapture_v2(s[0], CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  CUdeviceptr inside = 0;
  cuMemAllocAsync(&inside, 128 * kMiB, s[0]);
  gpu.kernel(s[0]);
  cuMemFreeAsync(inside, s[0]);
  CUgraph g = nullptr;
  int launches = 0;
  if (cuStreamEndCapture(s[0], &g) == CUDA_SUCCESS) {
    CUgraphExec exec = nullptr;
    if (cuGraphInstantiateWithFlags(&exec, g, 0) == CUDA_SUCCESS) {
      for (int i = 0; i < 5; ++i) launches += cuGraphLaunch(exec, s[0]) == CUDA_SUCCESS;
      cuStreamSynchronize(s[0]);
      cuGraphExecDestroy(exec);
    }
    cuGraphDestroy(g);
  }
  emit("graph_launches", static_cast<unsigned long long>(launches));
  cuMemPoolTrimTo(pool, 0);
  cuDeviceGraphMemTrim(gpu.device);
  emit("bytes_after_trims", device_holds());
  // Fill to the end, give back, and go on.
  std::vector<CUdeviceptr> held;
  for (int i = 0; i < 64; ++i) {
    CUdeviceptr p = 0;
    if (cuMemAllocAsync(&p, 256 * kMiB, s[1]) != CUDA_SUCCESS) break;
    held.push_back(p);
  }
  emit("filled_bytes", held.size() * 256 * kMiB);
  emit("peak_device_bytes", device_holds());
  for (CUdeviceptr p : held) cuMemFreeAsync(p, s[1]);
  cuStreamSynchronize(s[1]);
  cuMemPoolTrimTo(pool, 0);
  CUdeviceptr again = 0;
  const bool recovered = cuMemAllocAsync(&again, 256 * kMiB, s[1]) == CUDA_SUCCESS;
  if (recovered) cuMemFreeAsync(again, s[1]);
  cuStreamSynchronize(s[1]);
  cuMemPoolTrimTo(pool, 0);
  emit("recovered", recovered ? 1 : 0);
  cuStreamDestroy_v2(s[0]);
  cuStreamDestroy_v2(s[1]);
  return 0;
}

// ---- NCCL-style shared buffers ----

int nccl_vmm() {
  Gpu gpu;
  if (!gpu.ok) return 1;
  constexpr std::size_t kSize = 256 * kMiB;
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle handle = 0;
  if (cuMemAddressReserve(&va, kSize, 0, 0, 0) || !gpu.map(va, kSize, &handle, true)) return 1;
  cuMemsetD32_v2(va, 7, 1);
  int fd = -1;
  if (cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)) return 1;
  // The peer: this program again, with the descriptor as its fd 3.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fd, 3);
  std::string arg_child = "--child", arg_mode = "workload:nccl-peer";
  char* argv[] = {g_self.data(), arg_child.data(), arg_mode.data(), nullptr};
  pid_t pid = 0;
  int status = -1;
  if (posix_spawn(&pid, g_self.c_str(), &actions, nullptr, argv, environ) == 0) waitpid(pid, &status, 0);
  posix_spawn_file_actions_destroy(&actions);
  close(fd);
  unsigned value = 0;
  cuMemcpyDtoH_v2(&value, va, sizeof value);
  emit("peer_exit", WIFEXITED(status) ? static_cast<unsigned long long>(WEXITSTATUS(status)) : 99);
  emit("peer_wrote", value);
  std::size_t free = 0, total = 0;
  cuMemGetInfo_v2(&free, &total);
  emit("device_bytes", device_holds());
  cuMemUnmap(va, kSize);
  cuMemRelease(handle);
  cuMemAddressFree(va, kSize);
  return 0;
}

int nccl_peer() {
  Gpu gpu;
  if (!gpu.ok) return 1;
  CUmemGenericAllocationHandle handle = 0;
  if (cuMemImportFromShareableHandle(&handle, reinterpret_cast<void*>(std::intptr_t{3}),
                                     CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
    return 2;
  constexpr std::size_t kSize = 256 * kMiB;
  CUdeviceptr va = 0;
  CUmemAccessDesc access{};
  access.location = gpu.prop().location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (cuMemAddressReserve(&va, kSize, 0, 0, 0) || cuMemMap(va, kSize, 0, handle, 0) ||
      cuMemSetAccess(va, kSize, &access, 1))
    return 3;
  unsigned value = 0;
  cuMemcpyDtoH_v2(&value, va, sizeof value);
  if (value != 7) return 4;
  cuMemsetD32_v2(va, 9, 1);
  std::size_t free = 0, total = 0;
  cuMemGetInfo_v2(&free, &total);
  emit("peer_sees_used", total - free);  // the tenant's: the buffer counted once, by its exporter
  std::fflush(stdout);
  cuMemUnmap(va, kSize);
  cuMemRelease(handle);
  cuMemAddressFree(va, kSize);
  return 0;
}

// ---- a stream per request ----

int stream_per_request() {
  Gpu gpu;
  if (!gpu.ok) return 1;
  int served = 0;
  for (int request = 0; request < 400; ++request) {
    CUstream s = nullptr;
    if (cuStreamCreate(&s, CU_STREAM_NON_BLOCKING)) break;
    served += gpu.kernel(s, 100 * kUs) == CUDA_SUCCESS;
    if (request % 2 == 0) cuStreamSynchronize(s);
    cuStreamDestroy_v2(s);
  }
  cuCtxSynchronize();
  emit("served", static_cast<unsigned long long>(served));
  return 0;
}

}  // namespace

int run_workload(const std::string& name) {
  if (name == "caching-allocator") return caching_allocator();
  if (name == "vllm") return vllm();
  if (name == "async-pools") return async_pools();
  if (name == "nccl-vmm") return nccl_vmm();
  if (name == "nccl-peer") return nccl_peer();
  if (name == "stream-per-request") return stream_per_request();
  std::printf("unknown workload %s\n", name.c_str());
  return 1;
}

}  // namespace slice_test
