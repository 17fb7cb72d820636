// Where managed memory lives (shim/accounts.h, ManagedAccounts): advice that prefers a location, and
// prefetches, that cover a whole managed allocation move its charge there. A prefetch onto a device
// is an allocation there and is refused past the cap; advice only says where the memory should go,
// so it moves the charge without refusing. Part of an allocation moves nothing.
#include "accounts.h"
#include "hook_support.h"

namespace slice::shim {

void note_managed(Session& s, CUdeviceptr base, std::uint64_t bytes) {
  g_managed_made.store(true, std::memory_order_release);  // before it is recorded: frees look from now on
  std::lock_guard<std::mutex> lock(s.managed->mu);
  s.managed->sizes[base] = bytes;
  s.managed->count.store(s.managed->sizes.size(), std::memory_order_relaxed);
}

void erase_managed(Session& s, CUdeviceptr base) {
  if (s.managed->count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(s.managed->mu);
  s.managed->sizes.erase(base);
  s.managed->count.store(s.managed->sizes.size(), std::memory_order_relaxed);
}

namespace {

constexpr int kHost = -1, kUnknown = -2;

int target_of(Session& s, const CUmemLocation& where) {
  switch (where.type) {
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return kHost;
    case CU_MEM_LOCATION_TYPE_DEVICE: {
      const int index = s.index_of(where.id);
      return index >= 0 ? index : kUnknown;
    }
    default:
      return kUnknown;
  }
}

int target_of(Session& s, CUdevice device) {
  if (device == CU_DEVICE_CPU) return kHost;
  const int index = s.index_of(device);
  return index >= 0 ? index : kUnknown;
}

// Moves the charge of the managed allocation that [ptr, ptr+count) covers whole to `target` around
// `call`; `checked`: refused (CUDA_ERROR_OUT_OF_MEMORY) where it does not fit.
template <typename Call>
CUresult place(Session& s, CUdeviceptr ptr, std::size_t count, int target, bool checked, const char* what,
               Call&& call) {
  std::uint64_t size = 0;
  if (s.managed->count.load(std::memory_order_relaxed) != 0) {
    std::lock_guard<std::mutex> lock(s.managed->mu);
    if (const auto it = s.managed->sizes.find(ptr); it != s.managed->sizes.end()) size = it->second;
  }
  const std::optional<Charge> now = size != 0 ? s.pointers.find(ptr) : std::nullopt;
  if (!now || count < size || target == kUnknown) return call();
  if (target == kHost) {
    const CUresult rc = call();
    if (rc == CUDA_SUCCESS && now->bytes != 0) {
      s.pointers.insert(ptr, Charge{now->device, 0, now->owner});
      uncharge(s, now->device, now->bytes);
    }
    return rc;
  }
  if (now->bytes != 0 && now->device == target) return call();
  if (checked) {
    if (!charge(s, target, size, what)) return CUDA_ERROR_OUT_OF_MEMORY;
  } else {
    s.coordinator->charge_unchecked(target, size);
  }
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    uncharge(s, target, size);
    return rc;
  }
  s.pointers.insert(ptr, Charge{target, size, now->owner});
  uncharge(s, now->device, now->bytes);
  return rc;
}

}  // namespace
}  // namespace slice::shim

using namespace slice::shim;

SLICE_HOOK_BODY(CUresult, cuMemAdvise)(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemAdvise, devPtr, count, advice, device); };
  return accounted(
      [&](Session& s) {
        if (advice != CU_MEM_ADVISE_SET_PREFERRED_LOCATION) return call();
        return place(s, devPtr, count, target_of(s, device), false, "cuMemAdvise", call);
      },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemAdvise_v2)
(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemAdvise_v2, devPtr, count, advice, location); };
  return accounted(
      [&](Session& s) {
        if (advice != CU_MEM_ADVISE_SET_PREFERRED_LOCATION) return call();
        return place(s, devPtr, count, target_of(s, location), false, "cuMemAdvise", call);
      },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemPrefetchAsync)(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemPrefetchAsync, devPtr, count, dstDevice, hStream); };
  return accounted(
      [&](Session& s) { return place(s, devPtr, count, target_of(s, dstDevice), true, "cuMemPrefetchAsync", call); },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemPrefetchAsync_ptsz)
(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemPrefetchAsync_ptsz, devPtr, count, dstDevice, hStream); };
  return accounted(
      [&](Session& s) { return place(s, devPtr, count, target_of(s, dstDevice), true, "cuMemPrefetchAsync", call); },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemPrefetchAsync_v2)
(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, CUstream hStream) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemPrefetchAsync_v2, devPtr, count, location, flags, hStream); };
  return accounted(
      [&](Session& s) { return place(s, devPtr, count, target_of(s, location), true, "cuMemPrefetchAsync", call); },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemPrefetchAsync_v2_ptsz)
(CUdeviceptr devPtr, size_t count, CUmemLocation location, unsigned int flags, CUstream hStream) {
  const auto call = [&] {
    return SLICE_CALL_REAL(cuMemPrefetchAsync_v2_ptsz, devPtr, count, location, flags, hStream);
  };
  return accounted(
      [&](Session& s) { return place(s, devPtr, count, target_of(s, location), true, "cuMemPrefetchAsync", call); },
      call);
}
