// What the process is told about memory: the slice, not the device. cuMemGetInfo and
// cuDeviceTotalMem (both ABIs) answer total = min(cap, device) and free = min(device free,
// cap - usage), never negative; where there is no cap the driver's answer stands.
#include <algorithm>

#include "accounts.h"
#include "hook_support.h"
#include "memory_report.h"
#include "reconcile.h"

namespace slice::shim {

SliceMemory slice_of(Session& s, int device, std::uint64_t device_total, std::uint64_t device_free, SliceLook look) {
  SliceMemory m{device_total, device_free, false};
  const std::uint64_t cap = s.coordinator->cap(device);
  if (cap == kNoLimit) return m;
  if (look == SliceLook::settle_and_reconcile) {
    settle_pools(s, device);                 // a synchronisation may have given pool memory back
    reconcile(s, device, kReconcileTickNs);  // and the driver may hold memory no call charged
  }
  return clamp_to_cap(device_total, device_free, cap, s.coordinator->usage_without_dead(device));
}

SliceMemory clamp_to_cap(std::uint64_t device_total, std::uint64_t device_free, std::uint64_t cap,
                         std::uint64_t usage) {
  if (cap == kNoLimit) return {device_total, device_free, false};
  const std::uint64_t room = cap > usage ? cap - usage : 0;
  return {std::min(cap, device_total), std::min(device_free, room), true};
}

}  // namespace slice::shim

using namespace slice::shim;

namespace {

template <typename Size, typename Call>
CUresult mem_get_info(Size* free, Size* total, Call&& call) {
  return accounted(
      [&](Session& s) {
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS || free == nullptr || total == nullptr) return rc;
        const int device = current_device_index(s);
        if (device < 0) return rc;
        const SliceMemory m = slice_of(s, device, *total, *free);
        *total = static_cast<Size>(m.total);
        *free = static_cast<Size>(m.free);
        return rc;
      },
      call);
}

template <typename Size, typename Call>
CUresult device_total_mem(Size* bytes, CUdevice dev, Call&& call) {
  return accounted(
      [&](Session& s) {
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS || bytes == nullptr) return rc;
        const int device = s.index_of(dev);
        if (device < 0) return rc;
        const std::uint64_t cap = s.coordinator->cap(device);
        if (cap != slice::kNoLimit) *bytes = static_cast<Size>(std::min<std::uint64_t>(*bytes, cap));
        return rc;
      },
      call);
}

}  // namespace

SLICE_HOOK_BODY(CUresult, cuMemGetInfo_v2)(size_t* free, size_t* total) {
  return mem_get_info(free, total, [&] { return SLICE_CALL_REAL(cuMemGetInfo_v2, free, total); });
}

SLICE_HOOK_BODY(CUresult, cuMemGetInfo)(unsigned int* free, unsigned int* total) {
  return mem_get_info(free, total, [&] { return SLICE_CALL_REAL(cuMemGetInfo, free, total); });
}

SLICE_HOOK_BODY(CUresult, cuDeviceTotalMem_v2)(size_t* bytes, CUdevice dev) {
  return device_total_mem(bytes, dev, [&] { return SLICE_CALL_REAL(cuDeviceTotalMem_v2, bytes, dev); });
}

SLICE_HOOK_BODY(CUresult, cuDeviceTotalMem)(unsigned int* bytes, CUdevice dev) {
  return device_total_mem(bytes, dev, [&] { return SLICE_CALL_REAL(cuDeviceTotalMem, bytes, dev); });
}
