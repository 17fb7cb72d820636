// cuInit: the start of a CUDA process's session. A bad configuration fails here, before the
// driver is asked; otherwise the driver initialises and then the process joins its tenant.
#include "hook_support.h"

using namespace slice::shim;

SLICE_HOOK_BODY(CUresult, cuInit)(unsigned int Flags) {
  const auto real = SLICE_REAL(cuInit);
  if (real == nullptr) return CUDA_ERROR_NOT_INITIALIZED;   // no driver: as if libslice were not there
  if (session_config() == nullptr) return start_session();  // fails closed, with one error line
  if (disabled()) return call_real(real, Flags);
  const CUresult rc = call_real(real, Flags);
  if (rc != CUDA_SUCCESS) return rc;
  return start_session();
}
