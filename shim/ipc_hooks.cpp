// CUDA IPC. Opening another process's memory maps memory that process allocated: it is new to
// this tenant only when the exporter belongs to another tenant (or is gone), so only then is it
// charged. Exports are remembered in the tenant's file by a digest of the handle. The size is
// known only once the handle is open, so the charge follows the open; one that does not fit is
// closed again and refused.
#include <algorithm>
#include <cstring>

#include "accounts.h"
#include "hook_support.h"
#include "log.h"

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
        std::lock_guard<std::mutex> lock(s.ipc->mu);  // an open and a close of one address in order
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        IpcAccounts::Open& open = s.ipc->opens[*pdptr];
        if (open.count++ > 0) return rc;  // opened before: the driver counts it, charged once
        open.context = current_context(s).key;
        if (s.coordinator->ipc_exported_by_tenant(digest_of(handle))) return rc;  // charged to us already
        // The GPU the memory lives on (with peer access, not necessarily the current one).
        int ordinal = -1;
        CUdeviceptr base = 0;
        std::size_t size = 0;
        if (call_real(SLICE_REAL(cuPointerGetAttribute), &ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, *pdptr) !=
                CUDA_SUCCESS ||
            call_real(SLICE_REAL(cuMemGetAddressRange_v2), &base, &size, *pdptr) != CUDA_SUCCESS)
          return rc;
        const int device = ordinal >= 0 && ordinal < static_cast<int>(s.devices.size()) ? ordinal : -1;
        if (device < 0) return rc;
        if (!charge(s, device, size, "cuIpcOpenMemHandle")) {
          SLICE_CALL_REAL(cuIpcCloseMemHandle, *pdptr);
          s.ipc->opens.erase(*pdptr);
          *pdptr = 0;
          return CUDA_ERROR_OUT_OF_MEMORY;
        }
        open.device = device;
        open.bytes = size;
        return rc;
      },
      call);
}

void note_export(Session& s, CUdeviceptr dptr, std::uint64_t digest) {
  g_ipc_exports_made.store(true, std::memory_order_release);  // before it is recorded: frees look from now on
  if (!s.coordinator->note_ipc_export(digest))
    log::warn("tenant '" + s.config.tenant +
              "': its table of CUDA IPC exports is full near this handle's place; "
              "a process of the tenant that opens it is charged for it again");
  std::lock_guard<std::mutex> lock(s.ipc->mu);
  IpcAccounts::Export& e = s.ipc->exports[dptr];
  if (e.digests.empty()) e.context = current_context(s).key;
  if (std::find(e.digests.begin(), e.digests.end(), digest) == e.digests.end()) e.digests.push_back(digest);
  s.ipc->export_count.store(s.ipc->exports.size(), std::memory_order_relaxed);
}

}  // namespace

void withdraw_ipc_exports(Session& s, CUdeviceptr dptr, std::uint64_t context) {
  if (s.ipc->export_count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(s.ipc->mu);
  for (auto it = s.ipc->exports.begin(); it != s.ipc->exports.end();) {
    if (context != 0 ? it->second.context != context : it->first != dptr) {
      ++it;
      continue;
    }
    for (std::uint64_t digest : it->second.digests) s.coordinator->withdraw_ipc_export(digest);
    it = s.ipc->exports.erase(it);
  }
  s.ipc->export_count.store(s.ipc->exports.size(), std::memory_order_relaxed);
}

}  // namespace slice::shim

using namespace slice::shim;

SLICE_HOOK_BODY(CUresult, cuIpcGetMemHandle)(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  return after_success([&] { return SLICE_CALL_REAL(cuIpcGetMemHandle, pHandle, dptr); },
                       [&](Session& s) { note_export(s, dptr, digest_of(*pHandle)); });
}

SLICE_HOOK_BODY(CUresult, cuIpcOpenMemHandle_v2)(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return open_handle(pdptr, handle, [&] { return SLICE_CALL_REAL(cuIpcOpenMemHandle_v2, pdptr, handle, Flags); });
}

SLICE_HOOK_BODY(CUresult, cuIpcOpenMemHandle)(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int Flags) {
  return open_handle(pdptr, handle, [&] { return SLICE_CALL_REAL(cuIpcOpenMemHandle, pdptr, handle, Flags); });
}

SLICE_HOOK_BODY(CUresult, cuIpcCloseMemHandle)(CUdeviceptr dptr) {
  const auto call = [&] { return SLICE_CALL_REAL(cuIpcCloseMemHandle, dptr); };
  return accounted(
      [&](Session& s) {
        std::lock_guard<std::mutex> lock(s.ipc->mu);
        const CUresult rc = call();
        const auto it = s.ipc->opens.find(dptr);
        if (rc == CUDA_SUCCESS && it != s.ipc->opens.end() && --it->second.count <= 0) {
          uncharge(s, it->second.device, it->second.bytes);
          s.ipc->opens.erase(it);
        }
        return rc;
      },
      call);
}
