// Streams the application destroys: libslice forgets them first (the compute watcher's targets, a
// capture they began), so that no call of libslice's ever names a destroyed stream. Servers that
// make a stream per request destroy thousands.
#include "around.h"
#include "capture.h"
#include "compute.h"
#include "hook_support.h"

using namespace slice::shim;

CUresult slice::shim::destroy_stream(CUstream stream, RealCall call) {
  return accounted(
      [&](Session& s) {
        forget_targets(s, stream, nullptr);
        capture_stream_destroyed(stream);
        return call();
      },
      call);
}
