// Stream-ordered allocation and memory pools. A pool reserves device memory in 2 MiB chunks and
// keeps what is freed into it until a synchronisation trims it to the release threshold, or
// cuMemPoolTrimTo trims it: memory a pool keeps stays in use on the device, as on the real driver.
// On a capturing stream, cuMemAllocAsync and cuMemFreeAsync become graph memory nodes instead.
//
// Reuse follows stream order: a cuMemFreeAsync ends the allocation at once in API order (the pool's
// USED_MEM_CURRENT drops), but the memory is reusable by other streams only once the stream has
// reached the free; until then only allocations on that same stream may take it. So a pool whose
// idle memory is still pending on another stream grows, although RESERVED - USED says it has room.
// A pool in host memory (CU_MEM_LOCATION_TYPE_HOST, _HOST_NUMA) takes no device memory.
#include <algorithm>

#include "capture.h"

namespace simgpu {

struct MemPool {
  int device = 0;
  bool host = false;           // located in host memory: nothing charged on the device
  std::uint64_t reserved = 0;  // charged on the device: used + pending frees + free
  std::uint64_t used = 0;      // handed out to allocations, in API order
  struct PendingFree {
    std::uint64_t id;
    std::uint64_t bytes;
    const Stream* stream;  // reusable by allocations on this stream before the free completes
  };
  std::vector<PendingFree> pending;  // freed in API order, not yet reached by their streams
  std::uint64_t free = 0;            // reusable by any stream
  std::uint64_t reserved_high = 0;
  std::uint64_t used_high = 0;
  std::uint64_t release_threshold = 0;
  int reuse_follow_event = 1, reuse_opportunistic = 1, reuse_internal = 1;
  // cuMemPoolDestroy with allocations still out: the handle is gone, the memory stays until the
  // last of them is freed ("released automatically once there are no more outstanding allocations").
  bool destroyed = false;
};

namespace {

std::uint64_t chunk_round(std::uint64_t v) {
  return (v + kMemoryGranularity - 1) / kMemoryGranularity * kMemoryGranularity;
}

std::uint64_t pending_bytes(const MemPool* p, const Stream* only = nullptr) {
  std::uint64_t n = 0;
  for (const MemPool::PendingFree& f : p->pending)
    if (!only || f.stream == only) n += f.bytes;
  return n;
}

// Gives back reserved-but-unused memory above `keep` bytes, in whole chunks: never what a free still
// pending on its stream holds.
void trim_locked(MemPool* p, std::uint64_t keep) {
  // Nothing to give back when the pool may keep all it has; this also keeps a threshold near
  // UINT64_MAX (a common "never release" setting) from overflowing chunk_round below.
  if (keep >= p->reserved) return;
  std::uint64_t floor = chunk_round(std::max(p->used + pending_bytes(p), keep));
  if (p->reserved <= floor) return;
  const std::uint64_t give = std::min(p->reserved - floor, p->free);
  p->reserved -= give;
  p->free -= give;
  if (!p->host) uncharge_device(p->device, give);
}

// Takes `size` from what allocations on stream `s` may reuse now: the free memory, then frees still
// pending on `s` itself. False (and nothing taken) when that is not enough.
bool take_reusable(MemPool* p, std::uint64_t size, const Stream* s) {
  if (p->free + pending_bytes(p, s) < size) return false;
  const std::uint64_t from_free = std::min(p->free, size);
  p->free -= from_free;
  std::uint64_t left = size - from_free;
  for (auto it = p->pending.begin(); left != 0 && it != p->pending.end();) {
    if (it->stream != s) {
      ++it;
      continue;
    }
    const std::uint64_t take = std::min(left, it->bytes);
    it->bytes -= take;
    left -= take;
    it = it->bytes == 0 ? p->pending.erase(it) : it + 1;
  }
  return true;
}

MemPool* default_pool_locked(int device) {
  Driver& g = driver();
  if (!g.default_pool[device]) {
    auto* p = new MemPool();
    p->device = device;
    g.default_pool[device] = p;
    add_live_locked(p);
  }
  if (!g.current_pool[device]) g.current_pool[device] = g.default_pool[device];
  return g.current_pool[device];
}

// cuMemAllocAsync on a capturing stream: an allocation node of the captured graph, on the pool's
// device, whose fixed address is the result.
CUresult capture_alloc_locked(CUdeviceptr* dptr, std::size_t bytes, int device, Stream* s) {
  if (device < 0) return CUDA_ERROR_NOT_SUPPORTED;  // a host pool's allocation node is not simulated
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = ordinal_of(device);  // the node's parameters, as the application sees them
  p.bytesize = bytes;
  std::shared_ptr<GraphMemBlock> block;
  if (CUresult r = graph_make_alloc_block_locked(s->capture->graph, p, driver().device_count, &block)) return r;
  graph_attach_alloc_node_locked(capture_node_locked(s, CU_GRAPH_NODE_TYPE_MEM_ALLOC), p, std::move(block));
  *dptr = p.dptr;
  return CUDA_SUCCESS;
}

CUresult alloc_from_pool(CUdeviceptr* dptr, std::size_t bytes, MemPool* pool, CUstream hs, bool pt) {
  if (!dptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hs, pt, &s)) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  if (pool && !is_live_locked(pool)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = capture_submit_check_locked(s, "cuMemAllocAsync")) return r;
  if (s->capture) return capture_alloc_locked(dptr, bytes, pool ? (pool->host ? -1 : pool->device) : s->ctx->device, s);
  if (!pool) pool = default_pool_locked(s->ctx->device);
  const std::uint64_t size = (bytes + kAllocAlignment - 1) / kAllocAlignment * kAllocAlignment;
  if (!take_reusable(pool, size, s)) {
    // Grow by what the memory this stream may reuse now lacks, in whole chunks; the rest of the
    // new chunks is free memory of the pool.
    const std::uint64_t reusable = pool->free + pending_bytes(pool, s);
    std::uint64_t grow = chunk_round(size - reusable);
    if (!pool->host && !g.machine->charge(pool->device, grow)) {
      // The pool's own idle memory, then that of dead processes, before refusing.
      trim_locked(pool, 0);
      g.machine->reap_dead_slots();
      grow = chunk_round(size - (pool->free + pending_bytes(pool, s)));
      if (!g.machine->charge(pool->device, grow)) return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pool->reserved += grow;
    pool->free += grow;
    take_reusable(pool, size, s);
  }
  void* p = map_host_memory(size);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  pool->used += size;
  pool->used_high = std::max(pool->used_high, pool->used);
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  // Nothing charged here: the pool holds the charge.
  record_allocation_locked(reinterpret_cast<std::uintptr_t>(p), bytes, size, MemKind::pool, s->ctx, pool->device).pool =
      pool;
  *dptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult free_to_pool(CUdeviceptr dptr, CUstream hs, bool pt) {
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hs, pt, &s)) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  if (CUresult r = capture_submit_check_locked(s, "cuMemFreeAsync")) return r;
  if (s->capture) {
    // A captured free is a free node, which can only name a graph allocation (cuGraphAddMemFreeNode).
    if (CUresult r = graph_check_free_node_locked(s->capture->graph, dptr)) return r;
    graph_add_free_node_locked(capture_node_locked(s, CU_GRAPH_NODE_TYPE_MEM_FREE), dptr);
    return CUDA_SUCCESS;
  }
  auto it = g.allocations.find(static_cast<std::uintptr_t>(dptr));
  if (it != g.allocations.end() && it->second.kind == MemKind::graph) {
    // A graph allocation "can be freed by passing the allocation to cuMemFreeAsync" (its lifetime is
    // kept in API order: drv_graph_memory.cpp).
    const std::uintptr_t base = it->first;
    g.allocations.erase(it);
    graph_allocation_freed_locked(base);
    return CUDA_SUCCESS;
  }
  if (it == g.allocations.end() || it->second.kind != MemKind::pool) return CUDA_ERROR_INVALID_VALUE;
  Allocation a = it->second;
  g.allocations.erase(it);
  // In use no more (API order); reusable by other streams when the stream reaches the free.
  MemPool* pool = a.pool;
  const std::uint64_t bytes = std::min<std::uint64_t>(a.mapped, pool->used);
  pool->used -= bytes;
  const std::uint64_t id = g.next_id++;
  pool->pending.push_back({id, bytes, s});
  Op op;
  op.kind = Op::Kind::host;
  op.host = [a, pool, id] {
    std::lock_guard<std::mutex> lk2(driver().mu);
    for (auto f = pool->pending.begin(); f != pool->pending.end(); ++f)
      if (f->id == id) {  // (an allocation on the same stream may have taken part of it already)
        pool->free += f->bytes;
        pool->pending.erase(f);
        break;
      }
    unmap_host_memory(reinterpret_cast<void*>(a.base), a.mapped);
    if (pool->destroyed && pool->used == 0 && pool->pending.empty()) {  // the last one of a destroyed pool
      if (pool->reserved && !pool->host) uncharge_device(pool->device, pool->reserved);
      delete pool;
    }
  };
  enqueue_locked(s, std::move(op));
  return CUDA_SUCCESS;
}

MemPool* live_pool_locked(CUmemoryPool h) {
  auto* p = reinterpret_cast<MemPool*>(h);
  return is_live_locked(p) ? p : nullptr;
}

}  // namespace

void pool_trim_at_sync(int device) {
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  for (MemPool* p : {g.default_pool[device], g.current_pool[device]})
    if (p && is_live_quiet_locked(p)) trim_locked(p, p->release_threshold);
}

}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuMemAllocAsync(CUdeviceptr* d, size_t n, CUstream s) { return alloc_from_pool(d, n, nullptr, s, false); }
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* d, size_t n, CUstream s) { return alloc_from_pool(d, n, nullptr, s, true); }
CUresult cuMemAllocFromPoolAsync(CUdeviceptr* d, size_t n, CUmemoryPool p, CUstream s) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  return alloc_from_pool(d, n, reinterpret_cast<MemPool*>(p), s, false);
}
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* d, size_t n, CUmemoryPool p, CUstream s) {
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  return alloc_from_pool(d, n, reinterpret_cast<MemPool*>(p), s, true);
}
CUresult cuMemFreeAsync(CUdeviceptr d, CUstream s) { return free_to_pool(d, s, false); }
CUresult cuMemFreeAsync_ptsz(CUdeviceptr d, CUstream s) { return free_to_pool(d, s, true); }

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool* out, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  std::lock_guard<std::mutex> lk(driver().mu);
  default_pool_locked(dev);
  *out = reinterpret_cast<CUmemoryPool>(driver().default_pool[dev]);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetMemPool(CUmemoryPool* out, CUdevice dev) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  std::lock_guard<std::mutex> lk(driver().mu);
  *out = reinterpret_cast<CUmemoryPool>(default_pool_locked(dev));
  return CUDA_SUCCESS;
}

CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  if (CUresult r = ensure_initialized()) return r;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  dev = physical_device(dev);  // numbered physically from here on
  std::lock_guard<std::mutex> lk(driver().mu);
  MemPool* p = live_pool_locked(pool);
  if (!p || p->device != dev) return CUDA_ERROR_INVALID_VALUE;
  default_pool_locked(dev);
  driver().current_pool[dev] = p;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolCreate(CUmemoryPool* out, const CUmemPoolProps* props) {
  if (CUresult r = ensure_initialized()) return r;
  if (!out || !props) return CUDA_ERROR_INVALID_VALUE;
  if (props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  // Device pools, and pools in host memory (HOST, HOST_NUMA; HOST_NUMA_CURRENT is refused for pools).
  const CUmemLocationType where = props->location.type;
  if (where == CU_MEM_LOCATION_TYPE_DEVICE
          ? !valid_device(props->location.id)
          : where != CU_MEM_LOCATION_TYPE_HOST && where != CU_MEM_LOCATION_TYPE_HOST_NUMA)
    return CUDA_ERROR_INVALID_VALUE;
  if (where != CU_MEM_LOCATION_TYPE_DEVICE && props->handleTypes != CU_MEM_HANDLE_TYPE_NONE)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* p = new MemPool();
  p->host = where != CU_MEM_LOCATION_TYPE_DEVICE;
  p->device = p->host ? 0 : physical_device(props->location.id);
  add_live_locked(p);
  *out = reinterpret_cast<CUmemoryPool>(p);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  if (CUresult r = ensure_initialized()) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  MemPool* p = live_pool_locked(pool);
  if (!p || p == g.default_pool[p->device]) return CUDA_ERROR_INVALID_VALUE;
  if (g.current_pool[p->device] == p) g.current_pool[p->device] = g.default_pool[p->device];
  remove_live_locked(p);  // the handle is invalid from now on
  // "If any pointers obtained from this pool haven't been freed ... the resources associated with
  // the pool will be released automatically once there are no more outstanding allocations."
  const bool outstanding =
      std::any_of(g.allocations.begin(), g.allocations.end(), [&](const auto& a) { return a.second.pool == p; });
  if (outstanding || p->used != 0 || !p->pending.empty()) {
    p->destroyed = true;
    return CUDA_SUCCESS;
  }
  if (p->reserved && !p->host) uncharge_device(p->device, p->reserved);
  delete p;
  return CUDA_SUCCESS;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t keep) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  MemPool* p = live_pool_locked(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  trim_locked(p, keep);
  return CUDA_SUCCESS;
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult r = ensure_initialized()) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  MemPool* p = live_pool_locked(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      p->release_threshold = *static_cast<cuuint64_t*>(value);
      break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      p->reuse_follow_event = *static_cast<int*>(value);
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      p->reuse_opportunistic = *static_cast<int*>(value);
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      p->reuse_internal = *static_cast<int*>(value);
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;  // only a reset to 0
      p->reserved_high = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      p->used_high = p->used;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (CUresult r = ensure_initialized()) return r;
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  MemPool* p = live_pool_locked(pool);
  if (!p) return CUDA_ERROR_INVALID_VALUE;
  auto* u64 = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *u64 = p->release_threshold;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *u64 = p->reserved;
      break;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *u64 = p->reserved_high;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *u64 = p->used;
      break;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *u64 = p->used_high;
      break;
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
      *static_cast<int*>(value) = p->reuse_follow_event;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
      *static_cast<int*>(value) = p->reuse_opportunistic;
      break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = p->reuse_internal;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

}  // extern "C"
