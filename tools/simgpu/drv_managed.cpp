// Where managed memory lives. An allocation from cuMemAllocManaged is charged to the current device
// when it is made (no oversubscription is modelled). Advice or a prefetch that places the whole
// allocation elsewhere moves it: to host memory (the CPU, a host NUMA node), which takes no device
// memory, or to another device, which must have room (a prefetch fails with
// CUDA_ERROR_OUT_OF_MEMORY, advice leaves the memory where it was). Advice and prefetches of part of
// an allocation are accepted and move nothing.
#include "capture.h"

namespace simgpu {
namespace {

constexpr int kHost = -1;

// -1 for host memory, a device index, or -2 for a location that is not valid here.
int target_of(const CUmemLocation& where) {
  switch (where.type) {
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      return kHost;
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return valid_device(where.id) ? physical_device(where.id) : -2;
    default:
      return -2;
  }
}

CUmemLocation location_of(CUdevice device) {
  CUmemLocation where{};
  if (device == CU_DEVICE_CPU) {
    where.type = CU_MEM_LOCATION_TYPE_HOST;
  } else {
    where.type = CU_MEM_LOCATION_TYPE_DEVICE;
    where.id = device;
  }
  return where;
}

// Moves a managed allocation that [ptr, ptr+count) covers whole; false when the target device has no
// room for it.
bool place_locked(Allocation& a, std::uintptr_t ptr, std::size_t count, int target) {
  if (ptr != a.base || count < a.size) return true;  // part of it: nothing moves
  const bool on_host = a.charged == 0;
  if (target == kHost) {
    if (!on_host) driver().machine->uncharge(a.device, a.charged);
    a.charged = 0;
    return true;
  }
  if (!on_host && target == a.device) return true;
  const std::uint64_t bytes = a.mapped;
  if (!driver().machine->charge(target, bytes)) return false;
  if (!on_host) driver().machine->uncharge(a.device, a.charged);
  a.device = target;
  a.charged = bytes;
  return true;
}

CUresult advise(CUdeviceptr ptr, std::size_t count, CUmem_advise advice, const CUmemLocation& where) {
  if (CUresult r = ensure_initialized()) return r;
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  Allocation* a = find_allocation_locked(static_cast<std::uintptr_t>(ptr));
  if (!a || a->kind != MemKind::managed) return CUDA_ERROR_INVALID_VALUE;
  const int target = target_of(where);
  const bool needs_location = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                              advice == CU_MEM_ADVISE_SET_ACCESSED_BY || advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (needs_location && target == -2) return CUDA_ERROR_INVALID_DEVICE;
  if (advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION) place_locked(*a, static_cast<std::uintptr_t>(ptr), count, target);
  return CUDA_SUCCESS;
}

CUresult prefetch(CUdeviceptr ptr, std::size_t count, const CUmemLocation& where, unsigned flags, CUstream hs,
                  bool pt) {
  if (CUresult r = ensure_initialized()) return r;
  if (count == 0 || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hs, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  if (CUresult r = capture_submit_check_locked(s, "cuMemPrefetchAsync")) return r;
  Allocation* a = find_allocation_locked(static_cast<std::uintptr_t>(ptr));
  if (!a || a->kind != MemKind::managed) return CUDA_ERROR_INVALID_VALUE;
  const int target = target_of(where);
  if (target == -2) return CUDA_ERROR_INVALID_DEVICE;
  return place_locked(*a, static_cast<std::uintptr_t>(ptr), count, target) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

}  // namespace
}  // namespace simgpu

using namespace simgpu;

extern "C" {

CUresult cuMemAdvise_v2(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation where) {
  return advise(ptr, count, advice, where);
}

CUresult cuMemAdvise(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUdevice device) {
  return advise(ptr, count, advice, location_of(device));
}

CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t count, CUmemLocation where, unsigned int flags, CUstream s) {
  return prefetch(ptr, count, where, flags, s, false);
}

CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr ptr, size_t count, CUmemLocation where, unsigned int flags,
                                    CUstream s) {
  return prefetch(ptr, count, where, flags, s, true);
}

CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t count, CUdevice device, CUstream s) {
  return prefetch(ptr, count, location_of(device), 0, s, false);
}

CUresult cuMemPrefetchAsync_ptsz(CUdeviceptr ptr, size_t count, CUdevice device, CUstream s) {
  return prefetch(ptr, count, location_of(device), 0, s, true);
}

}  // extern "C"
