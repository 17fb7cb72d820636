// Stream-ordered allocation and memory pools. A pool's charge is what it holds reserved
// (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT), not what is allocated from it: memory kept after a free
// is memory in use. Before the driver is asked, the pool's possible growth (the request rounded
// to a chunk, less what the pool holds unused) is reserved against the cap; after it, the charge is
// set to what the pool really holds. A pool may grow although it seemed to have room (its idle
// memory fragmented, or freed on another stream and not reusable yet): where that takes the tenant
// past its cap, the allocation is freed again and refused, as if the estimate had been right.
// Pools in host memory are not VRAM and pass through.
#include "accounts.h"
#include "around.h"
#include "capture.h"
#include "hook_support.h"
#include "limits_text.h"
#include "log.h"

namespace slice::shim {
namespace {

std::uint64_t pool_attribute(CUmemoryPool pool, CUmemPool_attribute attribute) {
  cuuint64_t value = 0;
  const auto get = SLICE_REAL(cuMemPoolGetAttribute);
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

// Returns what the pool holds now.
std::uint64_t settle_pool(Session& s, CUmemoryPool pool, int device) {
  std::lock_guard<std::mutex> lock(s.pools->mu);
  auto [it, added] = s.pools->pools.try_emplace(pool, PoolAccounts::Pool{device, 0});
  settle_locked(s, pool, it->second);
  return it->second.charged;
}

int device_of_stream(Session& s, CUstream stream) {
  CUdevice device = 0;
  const auto get = SLICE_REAL(cuStreamGetDevice);
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
    if (s.pools->host_pools.contains(pool)) return -1;  // host memory: nothing to charge
  }
  const auto get_default = SLICE_REAL(cuDeviceGetDefaultMemPool);
  const auto get_current = SLICE_REAL(cuDeviceGetMemPool);
  for (const SessionDevice& d : s.devices) {
    CUmemoryPool p = nullptr;
    if ((get_default != nullptr && get_default(&p, d.handle) == CUDA_SUCCESS && p == pool) ||
        (get_current != nullptr && get_current(&p, d.handle) == CUDA_SUCCESS && p == pool))
      return d.ordinal;
  }
  return device_of_stream(s, stream);
}

// The pool grew past what was reserved for it and took the tenant past its cap: the allocation is
// freed again (in stream order) and refused. Unless a capture is in progress (when the stream may
// not be synchronised), the stream is synchronised and the pool trimmed back, so the memory is
// given back at once; otherwise at the pool's next release.
void refuse_overgrowth(Session& s, CUmemoryPool pool, int device, CUdeviceptr dptr, CUstream stream, bool ptsz,
                       std::uint64_t reserved_before, std::uint64_t bytes, const char* what) {
  if (ptsz)
    SLICE_OWN_CALL(cuMemFreeAsync_ptsz, dptr, stream);
  else
    SLICE_OWN_CALL(cuMemFreeAsync, dptr, stream);
  if (!captures_active()) {
    if (ptsz)
      SLICE_OWN_CALL(cuStreamSynchronize_ptsz, stream);
    else
      SLICE_OWN_CALL(cuStreamSynchronize, stream);
    SLICE_OWN_CALL(cuMemPoolTrimTo, pool, static_cast<size_t>(reserved_before));
  }
  settle_pool(s, pool, device);
  log::warn("tenant '" + s.config.tenant + "' GPU " + std::to_string(device) + ": " + what + " of " +
            describe_bytes(bytes) +
            " refused: its pool could not reuse its idle memory and grew past the cap "
            "(usage " +
            describe_bytes(s.coordinator->usage(device)) + " of " + describe_bytes(s.coordinator->cap(device)) +
            "); CUDA_ERROR_OUT_OF_MEMORY");
}

template <typename Call>
CUresult alloc_from(Session& s, CUmemoryPool pool, int device, std::uint64_t bytes, const char* what, CUdeviceptr* dptr,
                    CUstream stream, bool ptsz, Call&& call) {
  const std::uint64_t reserved = pool_attribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT);
  const std::uint64_t used = pool_attribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
  const std::uint64_t idle = reserved > used ? reserved - used : 0;
  const std::uint64_t need = pool_growth(bytes);
  const std::uint64_t growth = need > idle ? need - idle : 0;
  // Even with no growth expected the tenant must be within its cap: a request that fits the pool's
  // idle memory is refused once an earlier overgrowth left the tenant past it.
  const bool over = s.coordinator->usage(device) > s.coordinator->cap(device);
  if ((growth != 0 || over) && !charge(s, device, growth, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  const CUresult rc = call();
  const std::uint64_t held = settle_pool(s, pool, device);  // the real charge first: never a moment uncharged
  uncharge(s, device, growth);
  if (rc != CUDA_SUCCESS || dptr == nullptr) return rc;
  if (held > reserved + growth && s.coordinator->usage(device) > s.coordinator->cap(device)) {
    refuse_overgrowth(s, pool, device, *dptr, stream, ptsz, reserved, bytes, what);
    *dptr = 0;
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.pool_pointers.insert(*dptr, Charge{device, bytes, reinterpret_cast<std::uint64_t>(pool)});
  return rc;
}

// A stream being captured into a graph allocates nothing now: the graph's memory is charged when
// it is launched (shim/graph_memory_hooks.cpp). Charging here could refuse a capture that fits.
// Asked of the driver only while a capture is in progress (shim/capture.h).
bool capturing(CUstream stream, bool ptsz) { return captures_active() && stream_is_capturing(stream, ptsz); }

template <typename Call>
CUresult alloc_async(CUdeviceptr* dptr, size_t bytes, CUstream stream, bool ptsz, const char* what, Call&& call) {
  return accounted(
      [&](Session& s) {
        if (capturing(stream, ptsz)) return call();
        const int device = device_of_stream(s, stream);
        CUmemoryPool pool = nullptr;
        const auto get_pool = SLICE_REAL(cuDeviceGetMemPool);
        if (device < 0 || get_pool == nullptr || get_pool(&pool, s.devices[device].handle) != CUDA_SUCCESS)
          return call();
        if (device_of_pool(s, pool, stream) < 0) return call();  // a host pool made the device's current
        return alloc_from(s, pool, device, bytes, what, dptr, stream, ptsz, call);
      },
      call);
}

template <typename Call>
CUresult alloc_from_pool(CUdeviceptr* dptr, size_t bytes, CUmemoryPool pool, CUstream stream, bool ptsz,
                         const char* what, Call&& call) {
  return accounted(
      [&](Session& s) {
        if (capturing(stream, ptsz)) return call();
        const int device = device_of_pool(s, pool, stream);
        if (device < 0) return call();
        return alloc_from(s, pool, device, bytes, what, dptr, stream, ptsz, call);
      },
      call);
}

}  // namespace

void forget_pool_pointer(Session& s, CUdeviceptr dptr) {
  const std::optional<Charge> c = s.pool_pointers.take(dptr);
  if (!c || s.pools->orphan_count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(s.pools->mu);
  const auto it = s.pools->orphans.find(reinterpret_cast<CUmemoryPool>(c->owner));
  if (it == s.pools->orphans.end() || --it->second.outstanding != 0) return;
  // The last one: the driver releases the whole pool now.
  uncharge(s, it->second.device, it->second.charged);
  s.pools->orphans.erase(it);
  s.pools->orphan_count.fetch_sub(1);
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

SLICE_HOOK_BODY(CUresult, cuMemAllocAsync)(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream, false, "cuMemAllocAsync",
                     [&] { return SLICE_CALL_REAL(cuMemAllocAsync, dptr, bytesize, hStream); });
}

SLICE_HOOK_BODY(CUresult, cuMemAllocAsync_ptsz)(CUdeviceptr* dptr, size_t bytesize, CUstream hStream) {
  return alloc_async(dptr, bytesize, hStream, true, "cuMemAllocAsync",
                     [&] { return SLICE_CALL_REAL(cuMemAllocAsync_ptsz, dptr, bytesize, hStream); });
}

SLICE_HOOK_BODY(CUresult, cuMemAllocFromPoolAsync)
(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream, false, "cuMemAllocFromPoolAsync",
                         [&] { return SLICE_CALL_REAL(cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream); });
}

SLICE_HOOK_BODY(CUresult, cuMemAllocFromPoolAsync_ptsz)
(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream) {
  return alloc_from_pool(dptr, bytesize, pool, hStream, true, "cuMemAllocFromPoolAsync",
                         [&] { return SLICE_CALL_REAL(cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream); });
}

SLICE_HOOK_BODY(CUresult, cuMemPoolCreate)(CUmemoryPool* pool, const CUmemPoolProps* poolProps) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemPoolCreate, pool, poolProps); };
  return accounted(
      [&](Session& s) {
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS || poolProps == nullptr) return rc;
        if (poolProps->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {  // host memory: never charged
          std::lock_guard<std::mutex> lock(s.pools->mu);
          s.pools->host_pools.insert(*pool);
          return rc;
        }
        const int device = s.index_of(poolProps->location.id);
        if (device >= 0) settle_pool(s, *pool, device);
        return rc;
      },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemPoolDestroy)(CUmemoryPool pool) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemPoolDestroy, pool); };
  return accounted(
      [&](Session& s) {
        // With allocations still out, the driver keeps the whole pool until the last of them is
        // freed: its whole charge stays until then (forget_pool_pointer).
        const std::size_t outstanding = s.pool_pointers.count_owned_by(reinterpret_cast<std::uint64_t>(pool));
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        std::lock_guard<std::mutex> lock(s.pools->mu);
        s.pools->host_pools.erase(pool);
        const auto it = s.pools->pools.find(pool);
        if (it != s.pools->pools.end()) {
          const PoolAccounts::Pool p = it->second;
          s.pools->pools.erase(it);
          if (outstanding == 0) {
            uncharge(s, p.device, p.charged);
          } else {
            s.pools->orphans[pool] = PoolAccounts::Orphan{p.device, p.charged, outstanding};
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

SLICE_HOOK_BODY(CUresult, cuMemPoolTrimTo)(CUmemoryPool pool, size_t minBytesToKeep) {
  return settle_after(pool, [&] { return SLICE_CALL_REAL(cuMemPoolTrimTo, pool, minBytesToKeep); });
}

SLICE_HOOK_BODY(CUresult, cuMemPoolSetAttribute)(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
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

}  // namespace

// After a synchronisation that may have let pools give memory back (a free came before it). A load
// first: without a stream-ordered free since the last one, a synchronisation writes nothing.
CUresult slice::shim::synchronize(RealCall call) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  const CUresult rc = call();
  if (Session* s = current_session(); s != nullptr && s->pools->frees_pending.load(std::memory_order_relaxed) &&
                                      s->pools->frees_pending.exchange(false))
    settle_pools(*s, -1);
  return rc;
}

SLICE_HOOK_BODY(CUresult, cuMemFreeAsync)(CUdeviceptr dptr, CUstream hStream) {
  return free_async(dptr, [&] { return SLICE_CALL_REAL(cuMemFreeAsync, dptr, hStream); });
}

SLICE_HOOK_BODY(CUresult, cuMemFreeAsync_ptsz)(CUdeviceptr dptr, CUstream hStream) {
  return free_async(dptr, [&] { return SLICE_CALL_REAL(cuMemFreeAsync_ptsz, dptr, hStream); });
}
