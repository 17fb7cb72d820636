// gated_launch(_ex): the compute gate around every single-stream launch (kernels and graphs);
// the helper of the generated launch wrappers (hooked_functions.inc).
#pragma once

#include "capture.h"
#include "compute.h"
#include "hook_support.h"

namespace slice::shim {

// `ptsz`: the _ptsz entry point, whose stream 0 is the calling thread's per-thread default stream.
// A launch into a stream that is being captured is not device work: it runs, gated, when the graph
// is launched. It passes straight through, and nothing of libslice touches that stream.
template <typename Call>
CUresult gated_launch(CUstream stream, bool ptsz, Call&& call) {
  return accounted(
      [&](Session& s) {
        if (captures_active() && stream_is_capturing(stream, ptsz)) return call();
        const bool per_thread = is_per_thread(stream, ptsz);
        const GateTicket ticket = gate_enter(s, stream, per_thread);
        const CUresult rc = call();
        gate_leave(ticket, rc);
        return rc;
      },
      call);
}

// cuLaunchKernelEx: the stream is the launch configuration's.
template <typename Call>
CUresult gated_launch_ex(const CUlaunchConfig* config, bool ptsz, Call&& call) {
  return gated_launch(config != nullptr ? config->hStream : nullptr, ptsz, call);
}

}  // namespace slice::shim
