// cuGetProcAddress in both ABIs. The driver answers first; then (name, version, flags) is mapped to
// the export the driver handed out (slice::resolve_procaddr, generated from cudaTypedefs.h), and
// where that export is hooked the caller gets libslice's wrapper of exactly that export: never
// another ABI's wrapper, which would take the wrong argument layout.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <string>

#include "log.h"
#include "procaddr_map.h"
#include "shim.h"

#define SLICE_EXPORT __attribute__((visibility("default")))

namespace {

using slice::shim::Hook;

void substitute_wrapper(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr || slice::shim::disabled()) return;
  const slice::ProcAddrResolution resolved = slice::resolve_procaddr(symbol, cuda_version, flags);
  if (resolved.status != slice::ProcAddrStatus::found) return;  // the driver's answer stands
  const slice::shim::HookInfo* hook = slice::shim::find_hook(resolved.export_name);
  const bool ours = hook != nullptr && hook->library == slice::shim::HookLibrary::cuda;
  if (ours) *pfn = hook->wrapper;
  if (slice::log::enabled(slice::LogLevel::trace))  // tests/gpu reads these to see what the runtime fetches
    slice::log::write(slice::LogLevel::trace, std::string("cuGetProcAddress: ") + symbol + " (" +
                                                  std::to_string(cuda_version) + ", " + std::to_string(flags) +
                                                  ") -> " + std::string(resolved.export_name) +
                                                  (ours ? ", libslice's wrapper" : ", the driver's"));
}

}  // namespace

extern "C" SLICE_EXPORT CUresult cuGetProcAddress(const char* symbol, void** pfn, int cudaVersion,
                                                  cuuint64_t flags) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t);
  const auto real = reinterpret_cast<Fn>(slice::shim::real_function(Hook::cuGetProcAddress));
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult rc = real(symbol, pfn, cudaVersion, flags);
  if (rc == CUDA_SUCCESS) substitute_wrapper(symbol, pfn, cudaVersion, flags);
  return rc;
}

extern "C" SLICE_EXPORT CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int cudaVersion,
                                                     cuuint64_t flags,
                                                     CUdriverProcAddressQueryResult* symbolStatus) {
  using Fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  const auto real = reinterpret_cast<Fn>(slice::shim::real_function(Hook::cuGetProcAddress_v2));
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult rc = real(symbol, pfn, cudaVersion, flags, symbolStatus);
  if (rc == CUDA_SUCCESS) substitute_wrapper(symbol, pfn, cudaVersion, flags);
  return rc;
}
