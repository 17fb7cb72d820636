// Stream capture's beginning and end, in every ABI (shim/capture.h says why libslice follows them).
// The origin stream of each capture in progress is remembered; per-thread default streams by the
// thread that captures them, since their handle (0 or CU_STREAM_PER_THREAD) names a different
// stream in every thread.
#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <new>
#include <vector>

#include "around.h"
#include "capture.h"
#include "fork_guard.h"
#include "hook_support.h"

namespace slice::shim {

namespace capture_detail {
std::atomic<int> g_active{0};
std::shared_mutex g_query_mu;
}  // namespace capture_detail

namespace {

using capture_detail::g_active;
using capture_detail::g_query_mu;

struct Origin {
  CUstream stream;
  bool per_thread;   // the calling thread's per-thread default stream
  pthread_t thread;  // meaningful for per_thread only
};
// Guarded by g_query_mu (exclusive); made on first use (no static guard: a fork may come at any time).
std::vector<Origin>* g_origins = nullptr;
std::vector<Origin>& origins() {
  if (g_origins == nullptr) g_origins = new std::vector<Origin>();
  return *g_origins;
}

bool same(const Origin& o, CUstream stream, bool per_thread) {
  return per_thread ? o.per_thread && pthread_equal(o.thread, pthread_self()) : !o.per_thread && o.stream == stream;
}

void forget_origin_locked(CUstream stream, bool per_thread) {
  auto& v = origins();
  const auto it = std::find_if(v.begin(), v.end(), [&](const Origin& o) { return same(o, stream, per_thread); });
  if (it == v.end()) return;
  v.erase(it);
  g_active.fetch_sub(1, std::memory_order_release);
}

CUstreamCaptureStatus capture_status(CUstream stream, bool ptsz, CUresult* rc) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const auto is_capturing = ptsz ? SLICE_REAL(cuStreamIsCapturing_ptsz) : SLICE_REAL(cuStreamIsCapturing);
  *rc = is_capturing != nullptr ? is_capturing(stream, &status) : CUDA_ERROR_NOT_INITIALIZED;
  return status;
}

}  // namespace

// Captures are counted before the driver begins one, so that from the moment it has begun no query
// of libslice's can run; a capture that failed to begin is taken back.
CUresult begin_capture(CUstream stream, bool ptsz, RealCall call) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  install_fork_handlers();  // g_query_mu is re-made in a child
  const bool per_thread = is_per_thread(stream, ptsz);
  {
    std::unique_lock<std::shared_mutex> lock(g_query_mu);
    origins().push_back({stream, per_thread, pthread_self()});
    g_active.fetch_add(1, std::memory_order_release);
  }
  const CUresult rc = call();
  if (rc != CUDA_SUCCESS) {
    std::unique_lock<std::shared_mutex> lock(g_query_mu);
    forget_origin_locked(stream, per_thread);
  }
  return rc;
}

// Whatever cuStreamEndCapture answers (a graph, an invalidated or unjoined capture), the origin is
// asked afterwards whether it still captures: only the origin, in the right thread, ends a capture.
CUresult end_capture(CUstream stream, bool ptsz, RealCall call) {
  if (session_state() == SessionState::failed) return kFailedClosed;
  const CUresult rc = call();
  CUresult asked = CUDA_SUCCESS;
  if (capture_status(stream, ptsz, &asked) == CU_STREAM_CAPTURE_STATUS_NONE && asked == CUDA_SUCCESS) {
    std::unique_lock<std::shared_mutex> lock(g_query_mu);
    forget_origin_locked(stream, is_per_thread(stream, ptsz));
  }
  return rc;
}

bool stream_is_capturing(CUstream stream, bool ptsz) noexcept {
  CUresult rc = CUDA_SUCCESS;
  const CUstreamCaptureStatus status = capture_status(stream, ptsz, &rc);
  if (rc == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) return true;
  return rc == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void capture_stream_destroyed(CUstream stream) noexcept {
  if (!captures_active() || stream == nullptr || stream == CU_STREAM_PER_THREAD || stream == CU_STREAM_LEGACY) return;
  std::unique_lock<std::shared_mutex> lock(g_query_mu);
  forget_origin_locked(stream, false);
}

void capture_forget_ended() noexcept {
  if (!captures_active()) return;
  std::unique_lock<std::shared_mutex> lock(g_query_mu);
  auto& v = origins();
  for (auto it = v.begin(); it != v.end();) {
    CUresult rc = CUDA_SUCCESS;
    // Only streams that any thread may name; a per-thread stream is its own thread's to end.
    if (!it->per_thread && capture_status(it->stream, false, &rc) == CU_STREAM_CAPTURE_STATUS_NONE &&
        rc == CUDA_SUCCESS) {
      it = v.erase(it);
      g_active.fetch_sub(1, std::memory_order_release);
    } else {
      ++it;
    }
  }
}

// A forked child has no capture of its parent's (their streams are not its), and no thread that may
// have held the lock: both made anew (the old ones left as they were).
void capture_after_fork_in_child() noexcept {
  new (&g_query_mu) std::shared_mutex();
  g_origins = nullptr;
  g_active.store(0);
}

}  // namespace slice::shim

using namespace slice::shim;
