// Stream capture as the CUDA documentation describes it (Programming Guide, "CUDA Graphs": stream
// capture, cross-stream dependencies, prohibited and unhandled operations, invalidation; Driver API:
// cuStreamBeginCapture, cuThreadExchangeStreamCaptureMode, cuStreamEndCapture):
// - a capture begins on an origin stream; a stream that waits on an event recorded in the capture
//   joins it, and every joined stream must be joined back into the origin before cuStreamEndCapture
//   (else CUDA_ERROR_STREAM_CAPTURE_UNJOINED), which must be called on the origin
//   (CUDA_ERROR_STREAM_CAPTURE_UNMATCHED), by the thread that began it unless it is relaxed
//   (CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
// - querying or synchronising a capturing stream, a captured event, or a context with a capture,
//   returns an error and invalidates the capture: its streams refuse further work with
//   CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and cuStreamEndCapture returns that error and no graph;
// - the legacy stream may not be used while a blocking stream of its context captures
//   (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT; only cuStreamIsCapturing may ask, without invalidating);
// - "potentially unsafe" calls (memory allocation and free, synchronous copies, queries and
//   synchronisations) are prohibited to a thread whose own capture is not relaxed, and to a thread in
//   the global mode while another thread captures in the global mode; a thread's mode is set by
//   cuThreadExchangeStreamCaptureMode.
// Every such misuse is also reported as a violation (violations.h): the real driver fails the same
// way, and a test can assert that libslice never caused one.
#pragma once

#include <thread>
#include <vector>

#include "graph.h"

namespace simgpu {

struct Capture {
  std::uint64_t id = 0;
  Graph* graph = nullptr;
  bool user_graph = false;  // cuStreamBeginCaptureToGraph: the caller's graph, never destroyed here
  Stream* origin = nullptr;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;  // the thread that began it
  bool invalidated = false;
  std::vector<Stream*> streams;  // the origin, then every stream that joined
};

// All with g.mu held. The checks return CUDA_SUCCESS or the error the call must return.
// Work submitted to `s` (a launch, a copy, a host function, an allocation, an event record).
CUresult capture_submit_check_locked(Stream* s, const char* function);
// A query or synchronisation of `s`.
CUresult capture_sync_check_locked(Stream* s, const char* function);
// A query or synchronisation of `e`.
CUresult capture_event_check_locked(Event* e, const char* function);
// A synchronisation of context `c`.
CUresult capture_context_check_locked(Context* c, const char* function);
// A potentially unsafe call (allocation, free, synchronous copy) by the calling thread.
CUresult capture_unsafe_check_locked(const char* function);

CUresult capture_begin_locked(Stream* s, CUstreamCaptureMode mode, Graph* into, const CUgraphNode* deps,
                              std::size_t ndeps);
CUresult capture_end_locked(Stream* s, CUgraph* out);
// cuEventRecord on a capturing stream: the event becomes a captured event (no work is queued).
void capture_record_event_locked(Stream* s, Event* e);
// cuStreamWaitEvent when `s` captures or `e` is a captured event; `handled` tells whether it was
// (otherwise the wait is ordinary stream work).
CUresult capture_wait_event_locked(Stream* s, Event* e, unsigned flags, bool* handled);
// A stream destroyed while it takes part in a capture: the capture is invalidated.
void capture_stream_destroyed_locked(Stream* s);
// The active capture of this id, or nullptr.
Capture* find_capture_locked(std::uint64_t id);

}  // namespace simgpu
