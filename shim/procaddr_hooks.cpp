// cuGetProcAddress in both ABIs. The driver answers first; then (name, version, flags) is mapped to
// the export the driver should have handed out (slice::resolve_procaddr, generated from
// cudaTypedefs.h). The driver's answer decides which ABI the caller gets, not the table: where it is
// the real function of that export, the caller gets libslice's wrapper of exactly that export; where
// it is the real function of another hooked export (the table and the driver disagree), the wrapper
// of that one; where it is a function libslice does not know (an ABI newer than the cuda.h libslice
// was built with), the driver's answer stands, unhooked, with a warning: a wrapper of another ABI
// would read the wrong argument layout.
#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <mutex>
#include <new>
#include <set>
#include <string>

#include "log.h"
#include "procaddr_map.h"
#include "shim.h"

#include "fork_guard.h"
#include "hook_support.h"  // SLICE_EXPORT

namespace {

using slice::shim::Hook;
using slice::shim::HookInfo;

// The hooked driver export whose real function is `fn`, if any.
const HookInfo* hook_answering(void* fn) {
  for (std::size_t i = 0; i < slice::shim::kHookCount; ++i) {
    const HookInfo& info = slice::shim::hook_info(static_cast<Hook>(i));
    if (info.library == slice::shim::HookLibrary::cuda && slice::shim::real_function(info.hook) == fn) return &info;
  }
  return nullptr;
}

// The functions warned about, guarded by g_warned_mu; made on first use, never destroyed (hooks may
// run at exit), and no static guard (a fork may come at any time).
std::mutex g_warned_mu;
std::set<std::string>* g_warned = nullptr;

void warn_unknown_once(const char* symbol, int cuda_version) {
  std::lock_guard<std::mutex> lock(g_warned_mu);
  if (g_warned == nullptr) g_warned = new std::set<std::string>();
  if (!g_warned->insert(symbol).second) return;
  slice::log::warn(std::string("cuGetProcAddress(") + symbol + ", " + std::to_string(cuda_version) +
                   "): the driver answered a function libslice does not know (an ABI newer than libslice); "
                   "it is passed on unhooked, so what it allocates or launches is not sliced");
}

void substitute_wrapper(const char* symbol, void** pfn, int cuda_version, cuuint64_t flags) {
  if (symbol == nullptr || pfn == nullptr || *pfn == nullptr || slice::shim::disabled()) return;
  const slice::ProcAddrResolution resolved = slice::resolve_procaddr(symbol, cuda_version, flags);
  if (resolved.status != slice::ProcAddrStatus::found) return;  // the driver's answer stands
  const HookInfo* expected = slice::shim::find_hook(resolved.export_name);
  const bool hooked = expected != nullptr && expected->library == slice::shim::HookLibrary::cuda;
  const HookInfo* answered = nullptr;
  if (hooked) {
    answered = slice::shim::real_function(expected->hook) == *pfn ? expected : hook_answering(*pfn);
    if (answered != nullptr)
      *pfn = answered->wrapper;
    else
      warn_unknown_once(symbol, cuda_version);
  }
  if (!slice::log::enabled(slice::LogLevel::trace)) return;  // tests/gpu reads these: what the runtime fetches
  std::string line = std::string("cuGetProcAddress: ") + symbol + " (" + std::to_string(cuda_version) + ", " +
                     std::to_string(flags) + ") -> ";
  if (!hooked)
    line += std::string(resolved.export_name) + ", the driver's";
  else if (answered == nullptr)
    line += "a function libslice does not know, the driver's";
  else
    line += std::string(answered->name) + ", libslice's wrapper";
  if (answered != nullptr && answered != expected)
    line += std::string(" (the table says ") + resolved.export_name + ")";
  slice::log::write(slice::LogLevel::trace, line);
}

}  // namespace

// A forked child: no thread that may have held the lock.
void slice::shim::procaddr_after_fork_in_child() noexcept { new (&g_warned_mu) std::mutex(); }

SLICE_HOOK_BODY(CUresult, cuGetProcAddress)(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags) {
  const auto real = SLICE_REAL(cuGetProcAddress);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult rc = slice::shim::call_real(real, symbol, pfn, cudaVersion, flags);
  if (rc == CUDA_SUCCESS) substitute_wrapper(symbol, pfn, cudaVersion, flags);
  return rc;
}

SLICE_HOOK_BODY(CUresult, cuGetProcAddress_v2)
(const char* symbol, void** pfn, int cudaVersion, cuuint64_t flags, CUdriverProcAddressQueryResult* symbolStatus) {
  const auto real = SLICE_REAL(cuGetProcAddress_v2);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;
  const CUresult rc = slice::shim::call_real(real, symbol, pfn, cudaVersion, flags, symbolStatus);
  if (rc == CUDA_SUCCESS) substitute_wrapper(symbol, pfn, cudaVersion, flags);
  return rc;
}
