// Device memory: cuMemAlloc, pitched and managed allocations and their frees, in both ABIs (the
// legacy 32-bit exports are still in the driver, so they are charged too). Each allocation is
// charged before the driver is asked, recorded by its address, and given back at its free.
#include "accounts.h"
#include "hook_support.h"

namespace slice::shim {
namespace {

// Driver-dependent pitch alignment is not known before the call: this estimate is the one the
// refusal is decided on, and the charge then follows the pitch the driver chose.
constexpr std::uint64_t kPitchEstimateAlignment = 512;

// `managed`: cuMemAllocManaged, whose memory may move later (shim/managed_hooks.cpp).
template <typename Call>
CUresult alloc_on_current_device(const char* what, std::uint64_t bytes, const CUdeviceptr* out, Call&& call,
                                 bool managed = false) {
  return accounted(
      [&](Session& s) {
        const CurrentContext ctx = current_context(s);
        if (ctx.device < 0) return call();  // no current context: the driver refuses it itself
        const CUresult rc = charge_around(s, ctx.device, bytes, what, call);
        if (rc != CUDA_SUCCESS) return rc;
        record(s, s.pointers, *out, Charge{ctx.device, bytes, ctx.key});
        if (managed) note_managed(s, *out, bytes);
        return rc;
      },
      call);
}

template <typename Call>
CUresult free_pointer(CUdeviceptr dptr, Call&& call) {
  return accounted(
      [&](Session& s) {
        // Taken before the free: once the driver freed it, another thread may get the same address.
        const std::optional<Charge> c = s.pointers.take(dptr);
        const CUresult rc = call();
        if (c) {
          if (rc == CUDA_SUCCESS)
            uncharge(s, c->device, c->bytes);
          else
            s.pointers.insert(dptr, *c);
        } else if (rc == CUDA_SUCCESS) {
          forget_pool_pointer(s, dptr);  // cuMemFree may also free a stream-ordered allocation
        }
        if (rc == CUDA_SUCCESS) {
          forget_ipc_exports(s, dptr);  // a handle to it opens nothing now
          forget_managed(s, dptr);
        }
        return rc;
      },
      call);
}

template <typename Pitch, typename Call>
CUresult alloc_pitch(const char* what, const CUdeviceptr* out, Pitch* pitch, std::uint64_t width, std::uint64_t height,
                     Call&& call) {
  return accounted(
      [&](Session& s) {
        const CurrentContext ctx = current_context(s);
        const int device = ctx.device;
        if (device < 0 || width == 0 || height == 0) return call();
        const std::uint64_t estimate =
            (width + kPitchEstimateAlignment - 1) / kPitchEstimateAlignment * kPitchEstimateAlignment * height;
        const CUresult rc = charge_around(s, device, estimate, what, call);
        if (rc != CUDA_SUCCESS) return rc;
        const std::uint64_t real = static_cast<std::uint64_t>(*pitch) * height;
        settle_charge(s, device, estimate, real);
        record(s, s.pointers, *out, Charge{device, real, ctx.key});
        return rc;
      },
      call);
}

}  // namespace

void record(Session& s, AllocationTable& table, std::uint64_t key, Charge charge) {
  if (const std::optional<Charge> old = table.insert(key, charge)) uncharge(s, old->device, old->bytes);
}

void settle_charge(Session& s, int device, std::uint64_t charged, std::uint64_t bytes) {
  if (bytes > charged)
    s.coordinator->charge_unchecked(device, bytes - charged);
  else
    uncharge(s, device, charged - bytes);
}

}  // namespace slice::shim

using namespace slice::shim;

SLICE_HOOK_BODY(CUresult, cuMemAlloc_v2)(CUdeviceptr* dptr, size_t bytesize) {
  return alloc_on_current_device("cuMemAlloc", bytesize, dptr,
                                 [&] { return SLICE_CALL_REAL(cuMemAlloc_v2, dptr, bytesize); });
}

SLICE_HOOK_BODY(CUresult, cuMemAlloc)(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  CUdeviceptr wide = 0;
  return alloc_on_current_device("cuMemAlloc", bytesize, &wide, [&] {
    const CUresult rc = SLICE_CALL_REAL(cuMemAlloc, dptr, bytesize);
    if (rc == CUDA_SUCCESS) wide = *dptr;
    return rc;
  });
}

SLICE_HOOK_BODY(CUresult, cuMemAllocManaged)(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  return alloc_on_current_device(
      "cuMemAllocManaged", bytesize, dptr, [&] { return SLICE_CALL_REAL(cuMemAllocManaged, dptr, bytesize, flags); },
      true);
}

SLICE_HOOK_BODY(CUresult, cuMemAllocPitch_v2)
(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height, unsigned int ElementSizeBytes) {
  return alloc_pitch("cuMemAllocPitch", dptr, pPitch, WidthInBytes, Height, [&] {
    return SLICE_CALL_REAL(cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
  });
}

SLICE_HOOK_BODY(CUresult, cuMemAllocPitch)
(CUdeviceptr_v1* dptr, unsigned int* pPitch, unsigned int WidthInBytes, unsigned int Height,
 unsigned int ElementSizeBytes) {
  CUdeviceptr wide = 0;
  return alloc_pitch("cuMemAllocPitch", &wide, pPitch, WidthInBytes, Height, [&] {
    const CUresult rc = SLICE_CALL_REAL(cuMemAllocPitch, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (rc == CUDA_SUCCESS) wide = *dptr;
    return rc;
  });
}

SLICE_HOOK_BODY(CUresult, cuMemFree_v2)(CUdeviceptr dptr) {
  return free_pointer(dptr, [&] { return SLICE_CALL_REAL(cuMemFree_v2, dptr); });
}

SLICE_HOOK_BODY(CUresult, cuMemFree)(CUdeviceptr_v1 dptr) {
  return free_pointer(dptr, [&] { return SLICE_CALL_REAL(cuMemFree, dptr); });
}
