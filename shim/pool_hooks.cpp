// Stream-ordered allocation and memory pools. A pool's charge is what it holds reserved
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not what is allocated from it: memory kept after a free
// is memory in use. Before the driver is asked, the pool's possible growth (the request rounded
// to a chunk, less what the pool holds unused) is reserved against the cap; after it, the charge is
// set to what the pool really holds.
#include "accounts.h"
#include "hook_support.h"

namespace slice::shim {
namespace {

// The driver grows pools by whole chunks; the simulator's and current drivers' are 2 MiB.
constexpr std::uint64_t kPoolChunk = 2ull << 20;

std::uint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute attribute) {
  cuuint64_t value = 0;
  const auto get = SLICE_REAL_CU(cuMemPoolGetAttribute);
  if (get == nullptr || get(pool, attribute, &value) != CUDA_SUCCESS) return 0;
  return value;
}

// Sets a pool's charge to what it holds. The caller holds the accounts' lock.
bool settle_locked(Session& s, CUmemoryPool pool, PoolAccounts::Pool& p) {
  const std::uint64_t held = pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  const bool went_down = held < p.charged;
  settle_charge(s, p.device, p.charged, held);
  p.charged = held;
  return went_down;
}

void settle_pool(Session& s, CUmemoryPool pool, int device) {
  std::lock_guard<std::mutex> lock(s.pools->mu);
  auto [it, added] = s.pools->pools.try_emplace(pool, PoolAccounts::Pool{device, 0});
  settle_locked(s, pool, it->second);
}

int device_of_stream(Session& s, CUstream stream) {
  CUdevice device = 0;
  const auto get = SLICE_REAL_CU(cuStreamGetDevice);
  if (get != nullptr && get(stream, &device) == CUDA_SUCCESS) return s.index_of(device);
  return current_device_index(s);
}

// A pool's device: known once it has been seen (created through the hook, or settled before);
// else it is some device's default or current pool. A pool may serve a stream on another device, so
// the stream's device is only the last guess.
int device_of_pool(Session& s, CUmemoryPool pool, CUstream stream) {
  {
    std::lock_guard<std::mutex> lock(s.pools->mu);
    const auto it = s.pools->pools.find(pool);
    if (it != s.pools->pools.end()) return it->second.device;
  }
  const auto get_default = SLICE_REAL_CU(cuDeviceGetDefaultMemPool);
  const auto get_current = SLICE_REAL_CU(cuDeviceGetMemPool);
  for (const SessionDevice& d : s.devices) {
    CUmemoryPool p = nullptr;
    if ((get_default != nullptr && get_default(&p, d.handle) == CUDA_SUCCESS && p == pool) ||
        (get_current != nullptr && get_current(&p, d.handle) == CUDA_SUCCESS && p == pool))
      return d.ordinal;
  }
  return device_of_stream(s, stream);
}

template <typename Call>
CUresult alloc_from(Session& s, CUmemoryPool pool, int device, std::uint64_t bytes, const char* what,
                    const CUdeviceptr* dptr, Call&& call) {
  const std::uint64_t reserved = pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  const std::uint64_t used = pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  const std::uint64_t idle = reserved > used ? reserved - used : 0;
  const std::uint64_t need = (bytes + kPoolChunk - 1) / kPoolChunk * kPoolChunk;
  const std::uint64_t growth = need > idle ? need - idle : 0;
  if (growth != 0 && !charge(s, device, growth, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  settle_pool(s, pool, device);  // first the real charge, then the estimate goes: never a moment uncharged
  uncharge(s, device, growth);
  if (rc == CUDA_SUCCESS && dptr != nullptr)
    s.pool_pointers.insert(*dptr, Charge{device, bytes, reinterpret_cast<std::uint64_t>(pool)});
  return rc;
}

// A stream being captured into a graph allocates nothing now: the graph's memory is charged when
// it is launched (shim/graph_memory_hooks.cpp). Charging here could refuse a capture that fits.
bool capturing(CUstream stream) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const auto is_capturing = SLICE_REAL_CU(cuStreamIsCapturing);
  return is_capturing != nullptr && is_capturing(stream, &status) == CUDA_SUCCESS &&
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

template <typename Call>
CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream stream, const char* what, Call&& call) {
  return accounted(
      [&](Session& s) {
        if (capturing(stream)) return call();
        const int device = device_of_stream(s, stream);
        CUmemoryPool pool = nullptr;
        const auto get_pool = SLICE_REAL_CU(cuDeviceGetMemPool);
        if (device < 0 || get_pool == nullptr || get_pool(&pool, s.devices[device].handle) != CUDA_SUCCESS)
          return call();
        return alloc_from(s, pool, device, bytes, what, dptr, call);
      },
      call);
}

template <typename Call>
CUresult alloc_from_pool(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream, const char* what,
                         Call&& call) {
  return accounted(
      [&](Session& s) {
        if (capturing(stream)) return call();
        const int device = device_of_pool(s, pool, stream);
        if (device < 0) return call();
        return alloc_from(s, pool, device, bytes, what, dptr, call);
      },
      call);
}

}  // namespace

void forget_pool_pointer(Session& s, CUdeviceptr dptr) {
  const std::optional<Charge> c = s.pool_pointers.take(dptr);
  if (!c || s.pools->orphan_count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(s.pools->mu);
  const auto it = s.pools->orphans.find(reinterpret_cast<CUmemoryPool>(c->owner));
  if (it == s.pools->orphans.end()) return;
  const std::uint64_t back = std::min(c->bytes, it->second.charged);
  uncharge(s, it->second.device, back);
  it->second.charged -= back;
  if (it->second.charged == 0) {
    s.pools->orphans.erase(it);
    s.pools->orphan_count.fetch_sub(1);
  }
}

bool settle_pools(Session& s, int device) {
  bool went_down = false;
  {
    std::lock_guard<std::mutex> lock(s.pools->mu);
    for (auto& [pool, p] : s.pools->pools)
      if (device < 0 || p.device == device) went_down |= settle_locked(s, pool, p);
  }
  for (const SessionDevice& d : s.devices)
    if ((device < 0 || d.ordinal == device) && s.pools->graph_charged[d.ordinal] != 0)
      went_down |= settle_graph_memory(s, d.ordinal);
  return went_down;
}

}  // namespace slice::shim

using namespace slice::shim;

extern "C" SLICE_EXPORT CUresult cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream, "cuMemAllocAsync",
                     [&] { return SLICE_CALL_REAL(cuMemAllocAsync, dptr, bytesize, hStream); });
}

extern "C" SLICE_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream, "cuMemAllocAsync",
                     [&] { return SLICE_CALL_REAL(cuMemAllocAsync_ptsz, dptr, bytesize, hStream); });
}

extern "C" SLICE_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                         CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream, "cuMemAllocFromPoolAsync",
                         [&] { return SLICE_CALL_REAL(cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream); });
}

extern "C" SLICE_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                                              CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream, "cuMemAllocFromPoolAsync", [&] {
    return SLICE_CALL_REAL(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream);
  });
}

extern "C" SLICE_EXPORT CUresult cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemPoolCreate, pool, poolProps); };
  return accounted(
      [&](Session& s) {
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS && poolProps != nullptr && poolProps->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
          const int device = s.index_of(poolProps->location.id);
          if (device >= 0) settle_pool(s, *pool, device);
        }
        return rc;
      },
      call);
}

extern "C" SLICE_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemPoolDestroy, pool); };
  return accounted(
      [&](Session& s) {
        // Memory still allocated from the pool outlives it (the driver frees it with the last free,
        // which no one can report to us): it stays charged, the rest is given back.
        const std::uint64_t outstanding = pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        std::lock_guard<std::mutex> lock(s.pools->mu);
        const auto it = s.pools->pools.find(pool);
        if (it != s.pools->pools.end()) {
          PoolAccounts::Pool p = it->second;
          const std::uint64_t kept = std::min(p.charged, outstanding);
          uncharge(s, p.device, p.charged - kept);
          s.pools->pools.erase(it);
          if (kept != 0) {
            s.pools->orphans[pool] = PoolAccounts::Pool{p.device, kept};
            s.pools->orphan_count.fetch_add(1);
          }
        }
        return rc;
      },
      call);
}

namespace {

// After a call that may change what a known pool holds (a trim, a new release threshold).
template <typename Call>
CUresult settle_after(CUmemoryPool pool, Call&& call) {
  return after_success(call, [&](Session& s) {
    std::lock_guard<std::mutex> lock(s.pools->mu);
    const auto it = s.pools->pools.find(pool);
    if (it != s.pools->pools.end()) settle_locked(s, pool, it->second);
  });
}

}  // namespace

extern "C" SLICE_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  return settle_after(pool, [&] { return SLICE_CALL_REAL(cuMemPoolTrimTo, pool, minBytesToKeep); });
}

extern "C" SLICE_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  return settle_after(pool, [&] { return SLICE_CALL_REAL(cuMemPoolSetAttribute, pool, attr, value); });
}

namespace {

template <typename Call>
CUresult free_async(CUdeviceptr dptr, Call&& call) {
  return after_success(call, [&](Session& s) {
    forget_pool_pointer(s, dptr);
    s.pools->frees_pending.store(true, std::memory_order_relaxed);
  });
}

// After a synchronisation that may have let pools give memory back (a free came before it).
template <typename Call>
CUresult synchronize(Call&& call) {
  const CUresult rc = call();
  if (Session* s = current_session(); s != nullptr && s->pools->frees_pending.exchange(false))
    settle_pools(*s, -1);
  return rc;
}

}  // namespace

extern "C" SLICE_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream) {
  return free_async(dptr, [&] { return SLICE_CALL_REAL(cuMemFreeAsync, dptr, hStream); });
}

extern "C" SLICE_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream) {
  return free_async(dptr, [&] { return SLICE_CALL_REAL(cuMemFreeAsync_ptsz, dptr, hStream); });
}

extern "C" SLICE_EXPORT CUresult cuStreamSynchronize(CUstream hStream) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  return synchronize([&] { return SLICE_CALL_REAL(cuStreamSynchronize, hStream); });
}

extern "C" SLICE_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  return synchronize([&] { return SLICE_CALL_REAL(cuStreamSynchronize_ptsz, hStream); });
}

extern "C" SLICE_EXPORT CUresult cuEventSynchronize(CUevent hEvent) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  return synchronize([&] { return SLICE_CALL_REAL(cuEventSynchronize, hEvent); });
}

extern "C" SLICE_EXPORT CUresult cuCtxSynchronize(void) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  return synchronize([&] { return SLICE_CALL_REAL(cuCtxSynchronize); });
}

extern "C" SLICE_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  return synchronize([&] { return SLICE_CALL_REAL(cuCtxSynchronize_v2, ctx); });
}
