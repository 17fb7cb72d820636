// CUDA IPC. Opening another process's memory maps memory that process allocated: it is new to
// this tenant only when the exporter belongs to another tenant (or is gone), so only then is it
// charged. Exports are remembered in the tenant's file by a digest of the handle. The size is
// known only once the handle is open, so the charge follows the open; one that does not fit is
// closed again and refused.
#include <algorithm>
#include <cstring>
#include <optional>

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

// No lock is held across a call of the driver, nor across the charge (which, refused, may reconcile
// through NVML and write a line): the open's bookkeeping is under ipc->mu, and a second open of the
// same address waits for the first one's charge to be decided (IpcAccounts::settling).
template <typename Call>
CUresult open_handle(CUdeviceptr* pdptr, const CUipcMemHandle& handle, Call&& call) {
  return accounted(
      [&](Session& s) {
        const CUresult rc = call();
        if (rc != CUDA_SUCCESS) return rc;
        const CUdeviceptr dptr = *pdptr;
        // Asked before the lock is taken: its context, whether the tenant exported it, and the GPU
        // the memory lives on (with peer access, not necessarily the current one) and its size.
        const std::uint64_t context = current_context(s).key;
        const bool ours = s.coordinator->ipc_exported_by_tenant(digest_of(handle));
        int ordinal = -1;
        CUdeviceptr base = 0;
        std::size_t size = 0;
        const bool measured =
            !ours &&
            SLICE_REAL(cuPointerGetAttribute)(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dptr) == CUDA_SUCCESS &&
            SLICE_REAL(cuMemGetAddressRange_v2)(&base, &size, dptr) == CUDA_SUCCESS;
        const int device = ordinal >= 0 && ordinal < static_cast<int>(s.devices.size()) ? ordinal : -1;
        std::unique_lock<std::mutex> lock(s.ipc->mu);
        s.ipc->settled.wait(lock, [&] {
          const auto it = s.ipc->opens.find(dptr);
          return it == s.ipc->opens.end() || !it->second.settling;
        });
        IpcAccounts::Open& open = s.ipc->opens[dptr];
        if (open.count++ > 0) return rc;  // opened before: the driver counts it, charged once
        open.context = context;
        if (ours || !measured || device < 0) return rc;  // charged to the tenant already, or unknown
        open.settling = true;
        lock.unlock();
        const bool charged = charge(s, device, size, "cuIpcOpenMemHandle");
        lock.lock();
        IpcAccounts::Open& settled = s.ipc->opens[dptr];
        settled.settling = false;
        if (charged) {
          settled.device = device;
          settled.bytes = size;
        } else if (--settled.count <= 0) {
          s.ipc->opens.erase(dptr);
        }
        lock.unlock();
        s.ipc->settled.notify_all();
        if (charged) return rc;
        SLICE_REAL(cuIpcCloseMemHandle)(dptr);
        *pdptr = 0;
        return CUDA_ERROR_OUT_OF_MEMORY;
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
        // The close is counted before the driver's call (an open of the same address that the
        // driver allows after it is then recorded after it), and counted back if the driver refused.
        std::optional<IpcAccounts::Open> last;
        {
          std::unique_lock<std::mutex> lock(s.ipc->mu);
          s.ipc->settled.wait(lock, [&] {
            const auto it = s.ipc->opens.find(dptr);
            return it == s.ipc->opens.end() || !it->second.settling;
          });
          const auto it = s.ipc->opens.find(dptr);
          if (it != s.ipc->opens.end() && --it->second.count <= 0) {
            last = it->second;
            s.ipc->opens.erase(it);
          }
        }
        const CUresult rc = call();
        if (rc == CUDA_SUCCESS) {
          if (last) uncharge(s, last->device, last->bytes);
          return rc;
        }
        std::lock_guard<std::mutex> lock(s.ipc->mu);
        if (last) {
          last->count = 1;
          s.ipc->opens.try_emplace(dptr, *last);
        } else if (const auto it = s.ipc->opens.find(dptr); it != s.ipc->opens.end()) {
          ++it->second.count;
        }
        return rc;
      },
      call);
}
