// cuGetProcAddress in both ABIs: (name, version, flags) -> the export that cudaTypedefs.h (and the
// graphics interop typedef headers) assign, through the shared table in libslice/procaddr.
#include <cstring>
#include <string_view>

#include "driver.h"
#include "procaddr_map.h"

namespace simgpu {
void* export_address(std::string_view name);
}

using namespace simgpu;

namespace {
CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status) {
  if (!symbol || !pfn) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  // "If the specified CUDA version is greater than the driver version, the API will return
  // CUDA_ERROR_INVALID_VALUE" (cuda.h): a program built for a newer CUDA learns the driver is older.
  if (version > kDriverVersion) return CUDA_ERROR_INVALID_VALUE;
  const slice::ProcAddrResolution r = slice::resolve_procaddr(symbol, version, flags);
  CUdriverProcAddressQueryResult s = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (r.status == slice::ProcAddrStatus::version_not_sufficient) s = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
  if (r.status == slice::ProcAddrStatus::found) {
    *pfn = export_address(r.export_name);
    if (*pfn) s = CU_GET_PROC_ADDRESS_SUCCESS;
  }
  if (status) *status = s;
  // A name the driver does not have, or has only at a later version, is no error: the real driver
  // (580.159.04) answers CUDA_SUCCESS with a NULL pointer and says which in the status.
  return CUDA_SUCCESS;
}
}  // namespace

extern "C" {

CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return lookup(symbol, pfn, version, flags, nullptr);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  return lookup(symbol, pfn, version, flags, status);
}

CUresult cuDevicePrimaryCtxRelease(CUdevice dev) { return SIM_EXPORT_CALL(cuDevicePrimaryCtxRelease_v2)(dev); }
CUresult cuDevicePrimaryCtxReset(CUdevice dev) { return SIM_EXPORT_CALL(cuDevicePrimaryCtxReset_v2)(dev); }
CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return SIM_EXPORT_CALL(cuDevicePrimaryCtxSetFlags_v2)(dev, flags);
}

}  // extern "C"
