// CUDA IPC. Opening another process's memory maps memory that process allocated: it is new to
// this tenant only when the exporter belongs to another tenant (or is gone), so only then is it
// charged. Exports are remembered in the tenant's file by a digest of the handle. The size is
// known only once the handle is open, so the charge follows the open; one that does not fit is
// closed again and refused.
#include <cstring>

#include "hook_support.h"

namespace slice::shim {
namespace {

std::uint64_t digest_of(const CUipcMemHandle& handle) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the handle's bytes
  for (std::size_t i = 0; i < sizeof handle.reserved; ++i) {
    h ^= static_cast<unsigned char>(handle.reserved[i]);
    h *= 1099511628211ull;
  }
  return h;
}

template <typename Call>
CUresult open_handle(CUdeviceptr* pdptr, const CUipcMemHandle& handle, Call&& call) {
  return accounted(
      [&](Session& s) {
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS || s.coordinator->ipc_exported_by_tenant(digest_of(handle))) return rc;
        const int device = current_device_index(s);
        CUdeviceptr base = 0;
        std::size_t size = 0;
        if (device < 0 || call_real(SLICE_REAL_CU(cuMemGetAddressRange_v2), &base, &size, *pdptr) != CUDA_SUCCESS) return rc;
        if (!charge(s, device, size, "cuIpcOpenMemHandle")) {
          SLICE_CALL_REAL(cuIpcCloseMemHandle, *pdptr);
          *pdptr = 0;
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        record(s, s.ipc_opened, *pdptr, Charge{device, size, 0});
        return rc;
      },
      call);
}

}  // namespace
}  // namespace slice::shim

using namespace slice::shim;

extern "C" SLICE_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  const auto call = [&] { return SLICE_CALL_REAL(cuIpcGetMemHandle, pHandle, dptr); };
  return accounted(
      [&](Session& s) {
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS) s.coordinator->note_ipc_export(digest_of(*pHandle));
        return rc;
      },
      call);
}

extern "C" SLICE_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return open_handle(pdptr, handle, [&] { return SLICE_CALL_REAL(cuIpcOpenMemHandle_v2, pdptr, handle, Flags); });
}

extern "C" SLICE_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return open_handle(pdptr, handle, [&] { return SLICE_CALL_REAL(cuIpcOpenMemHandle, pdptr, handle, Flags); });
}

extern "C" SLICE_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr) {
  const auto call = [&] { return SLICE_CALL_REAL(cuIpcCloseMemHandle, dptr); };
  return accounted([&](Session& s) { return free_recorded(s, s.ipc_opened, dptr, call); }, call);
}
