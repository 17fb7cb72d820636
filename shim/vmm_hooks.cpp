// Virtual memory management. cuMemCreate is the allocation: charged before the driver is asked.
// The driver frees the memory when the handle is released AND every mapping of it is unmapped, so
// the charge is given back only then; mapping and unmapping cost nothing extra.
//
// The table must follow the driver's order. A map and an unmap of one address racing on two threads
// can only be put in the driver's order by holding the table's lock across their calls: taken out of
// the table before an unmap, a mapping put back when the driver refused it may be one another
// thread's unmap had already removed (the charge would stay for good; the accounting test's race
// caught it). So cuMemMap and cuMemUnmap hold vmm->mu across the driver's call: a hook inside the
// driver's own call passes straight through (hook_frame.h), and no holder waits on another thread
// meanwhile. A release takes no lock across its call (its reference is dropped after the driver's
// answer), and a retain counts its reference before the driver's call and takes it back if the call
// failed, so that a concurrent release cannot take the count to zero meanwhile.
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
  return after_success(call, [&](Session& s) {
    std::lock_guard<std::mutex> lock(s.vmm->mu);
    unreference_locked(s, handle);
  });
}

SLICE_HOOK_BODY(CUresult, cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle* handle, void* addr) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemRetainAllocationHandle, handle, addr); };
  return accounted(
      [&](Session& s) {
        // The handle mapped at addr, counted before the driver hands out its new reference.
        CUmemGenericAllocationHandle counted = 0;
        {
          std::lock_guard<std::mutex> lock(s.vmm->mu);
          auto m = s.vmm->mappings.upper_bound(reinterpret_cast<CUdeviceptr>(addr));
          if (m != s.vmm->mappings.begin()) {
            --m;
            const auto it = s.vmm->allocations.find(m->second.handle);
            if (reinterpret_cast<CUdeviceptr>(addr) < m->first + m->second.size && it != s.vmm->allocations.end()) {
              ++it->second.references;
              counted = m->second.handle;
            }
          }
        }
        const CUresult rc = call();
        if (counted != 0 && (rc != CUDA_SUCCESS || *handle != counted)) {
          std::lock_guard<std::mutex> lock(s.vmm->mu);
          unreference_locked(s, counted);
          if (rc == CUDA_SUCCESS) {  // another handle than the table says: count that one
            const auto it = s.vmm->allocations.find(*handle);
            if (it != s.vmm->allocations.end()) ++it->second.references;
          }
        } else if (counted == 0 && rc == CUDA_SUCCESS) {
          std::lock_guard<std::mutex> lock(s.vmm->mu);
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
        std::lock_guard<std::mutex> lock(s.vmm->mu);  // across the call: in the driver's order (above)
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        const auto it = s.vmm->allocations.find(handle);
        if (it == s.vmm->allocations.end()) return rc;
        ++it->second.references;
        const auto [m, added] = s.vmm->mappings.try_emplace(ptr, VmmAccounts::Mapping{handle, size});
        if (!added) {  // the driver let it map over a mapping we knew: that one is gone
          const CUmemGenericAllocationHandle old = m->second.handle;
          m->second = VmmAccounts::Mapping{handle, size};
          unreference_locked(s, old);
        }
        return rc;
      },
      call);
}

SLICE_HOOK_BODY(CUresult, cuMemUnmap)(CUdeviceptr ptr, size_t size) {
  const auto call = [&] { return SLICE_CALL_REAL(cuMemUnmap, ptr, size); };
  return accounted(
      [&](Session& s) {
        std::lock_guard<std::mutex> lock(s.vmm->mu);  // across the call: in the driver's order (above)
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        auto it = s.vmm->mappings.lower_bound(ptr);
        while (it != s.vmm->mappings.end() && it->first < ptr + size) {
          const CUmemGenericAllocationHandle h = it->second.handle;
          it = s.vmm->mappings.erase(it);
          unreference_locked(s, h);
        }
        return rc;
      },
      call);
}
