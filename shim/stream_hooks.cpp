// Streams the application destroys: libslice forgets them first (the compute watcher's targets, a
// capture they began), so that no call of libslice's ever names a destroyed stream. Servers that
// make a stream per request destroy thousands.
#include "capture.h"
#include "compute.h"
#include "hook_support.h"

using namespace slice::shim;

namespace {

template <typename Call>
CUresult destroy_stream(CUstream stream, Call&& call) {
  return accounted(
      [&](Session& s) {
        forget_targets(s, stream, nullptr);
        capture_stream_destroyed(stream);
        return call();
      },
      call);
}

}  // namespace

extern "C" SLICE_EXPORT CUresult cuStreamDestroy(CUstream hStream) {
  return destroy_stream(hStream, [&] { return SLICE_CALL_REAL(cuStreamDestroy, hStream); });
}

extern "C" SLICE_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream) {
  return destroy_stream(hStream, [&] { return SLICE_CALL_REAL(cuStreamDestroy_v2, hStream); });
}
