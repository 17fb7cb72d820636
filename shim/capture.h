// Stream capture, as libslice must respect it. While a stream is being captured, its work is not
// device work (it runs when the graph is launched, and is gated there), and the driver punishes
// a query or synchronisation of it, or of any event recorded in it, by invalidating the capture:
// cuStreamEndCapture then fails, and a framework's start-up (vLLM, torch.compile) with it.
// Streams join a capture through events (cuStreamWaitEvent) without any call naming the capture,
// so libslice cannot know every capturing stream; it knows when captures begin and end
// (shim/capture_hooks.cpp), and while any is in progress in this process it queries no stream and
// no event of its own at all. A capture beginning waits for a query already under way.
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>
#include <shared_mutex>

namespace slice::shim {

namespace capture_detail {
extern std::atomic<int> g_active;     // captures begun through the hooks and not yet ended
extern std::shared_mutex g_query_mu;  // shared: libslice's own queries; exclusive: a capture begins
}  // namespace capture_detail

// Whether any capture is in progress in this process: one relaxed load, for the launch path.
// Whether `stream` names the calling thread's per-thread default stream: CU_STREAM_PER_THREAD, or 0
// given to a _ptsz export.
inline bool is_per_thread(CUstream stream, bool ptsz) noexcept {
  return stream == CU_STREAM_PER_THREAD || (ptsz && stream == nullptr);
}

inline bool captures_active() noexcept { return capture_detail::g_active.load(std::memory_order_relaxed) != 0; }

// Runs `query` (libslice's own stream or event queries) only when no capture is in progress, and
// holds any capture from beginning until it is done. False when it did not run.
template <typename Query>
bool query_outside_capture(Query&& query) {
  std::shared_lock<std::shared_mutex> lock(capture_detail::g_query_mu);
  if (capture_detail::g_active.load(std::memory_order_acquire) != 0) return false;
  query();
  return true;
}

// Whether work submitted now to `stream` by the calling thread would be captured: asked of the
// driver (cuStreamIsCapturing, legal during a capture) only while captures are in progress. The
// legacy stream while a blocking stream captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) counts as
// capturing: it runs nothing either, the driver refuses it.
bool stream_is_capturing(CUstream stream, bool ptsz) noexcept;

// A stream the application destroys: if it was a capture's origin, that capture is over.
void capture_stream_destroyed(CUstream stream) noexcept;

// The watcher's check of captures that ended without cuStreamEndCapture passing through libslice:
// each origin stream is asked (cuStreamIsCapturing), and those no longer capturing are forgotten.
void capture_forget_ended() noexcept;

}  // namespace slice::shim
