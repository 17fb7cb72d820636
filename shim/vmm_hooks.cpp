// Virtual memory management. cuMemCreate is the allocation: charged before the driver is asked.
// The driver frees the memory when the handle is released AND every mapping of it is unmapped, so
// the charge is given back only then; mapping and unmapping cost nothing extra.
#include "accounts.h"
#include "hook_support.h"

namespace slice::shim {
namespace {

// Drops one reference; the caller holds the lock.
void unreference_locked(Session& s, CUmemGenericAllocationHandle handle) {
  const auto it = s.vmm->allocations.find(handle);
  if (it == s.vmm->allocations.end()) return;
  if (--it->second.references > 0) return;
  uncharge(s, it->second.device, it->second.bytes);
  s.vmm->allocations.erase(it);
}

}  // namespace
}  // namespace slice::shim

using namespace slice::shim;

SLICE_HOOK_BODY(CUresult, cuMemCreate)
(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop, unsigned long long flags) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemCreate, handle, size, prop, flags); };
  return accounted(
      [&](Session& s) {
        // Only device memory is charged; host (and host NUMA) locations are not VRAM.
        if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return call();
        const int device = s.index_of(prop->location.id);
        if (device < 0) return call();
        const CUresult rc = charge_around(s, device, size, "cuMemCreate", call);
        if (rc == CUDA_SUCCESS) {
          std::lock_guard<std::mutex> lock(s.vmm->mu);
          s.vmm->allocations[*handle] = VmmAccounts::Allocation{device, size, 1};
        }
        return rc;
      },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemRelease)(CUmemGenericAllocationHandle handle) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemRelease, handle); };
  return accounted(
      [&](Session& s) {
        std::lock_guard<std::mutex> lock(s.vmm->mu);  // across the call: see cuMemMap
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS) unreference_locked(s, handle);
        return rc;
      },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle* handle, void* addr) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemRetainAllocationHandle, handle, addr); };
  return accounted(
      [&](Session& s) {
        std::lock_guard<std::mutex> lock(s.vmm->mu);
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS) {
          const auto it = s.vmm->allocations.find(*handle);
          if (it != s.vmm->allocations.end()) ++it->second.references;
        }
        return rc;
      },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemMap)
(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle, unsigned long long flags) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemMap, ptr, size, offset, handle, flags); };
  return accounted(
      [&](Session& s) {
        // The driver's call and the table's update under one lock: an unmap and a map of the same
        // address racing would otherwise update the table in the other order, and drop the new
        // mapping's reference (uncharged while mapped) and keep the old one's (charged for good).
        std::lock_guard<std::mutex> lock(s.vmm->mu);
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS) {
          const auto it = s.vmm->allocations.find(handle);
          if (it != s.vmm->allocations.end()) {
            ++it->second.references;
            const auto [m, added] = s.vmm->mappings.try_emplace(ptr, VmmAccounts::Mapping{handle, size});
            if (!added) {  // the driver let it map over a mapping we knew: that one is gone
              const CUmemGenericAllocationHandle old = m->second.handle;
              m->second = VmmAccounts::Mapping{handle, size};
              unreference_locked(s, old);
            }
          }
        }
        return rc;
      },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemUnmap)(CUdeviceptr ptr, size_t size) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemUnmap, ptr, size); };
  return accounted(
      [&](Session& s) {
        std::lock_guard<std::mutex> lock(s.vmm->mu);  // across the call: see cuMemMap
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS) {
          auto it = s.vmm->mappings.lower_bound(ptr);
          while (it != s.vmm->mappings.end() && it->first < ptr + size) {
            const CUmemGenericAllocationHandle handle = it->second.handle;
            it = s.vmm->mappings.erase(it);
            unreference_locked(s, handle);
          }
        }
        return rc;
      },
      call);
}
