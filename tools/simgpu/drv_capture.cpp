// Stream capture: beginning and ending it, streams joining through captured events, the calling
// thread's capture mode, and the rules whose breach invalidates a capture (capture.h).
#include "capture.h"

#include <algorithm>
#include <set>

#include "drv_thread.h"

namespace simgpu {

namespace {

const char* mode_name(CUstreamCaptureMode m) {
  return m == CU_STREAM_CAPTURE_MODE_GLOBAL         ? "global"
         : m == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? "thread-local"
                                                    : "relaxed";
}

void invalidate_locked(Capture* c) { c->invalidated = true; }

// Blocking streams of `ctx` in a capture: the legacy stream may not be used meanwhile.
std::vector<Capture*> blocking_captures_locked(Context* ctx) {
  std::vector<Capture*> found;
  for (Capture* c : driver().captures)
    for (Stream* s : c->streams)
      if (s->ctx == ctx && !(s->flags & CU_STREAM_NON_BLOCKING) &&
          std::find(found.begin(), found.end(), c) == found.end())
        found.push_back(c);
  return found;
}

CUresult legacy_check_locked(Stream* s, const char* function) {
  if (!s->legacy) return CUDA_SUCCESS;
  const std::vector<Capture*> conflicts = blocking_captures_locked(s->ctx);
  if (conflicts.empty()) return CUDA_SUCCESS;
  for (Capture* c : conflicts) invalidate_locked(c);
  report_violation(function, "the legacy stream was used while a blocking stream of its context was capturing");
  return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
}

void leave_capture_locked(Stream* s) {
  s->capture = nullptr;
  s->capture_deps.clear();
}

// Every node the given ones depend on, themselves included.
std::set<const GraphNode*> ancestors(const std::vector<GraphNode*>& from) {
  std::set<const GraphNode*> seen;
  std::vector<const GraphNode*> todo(from.begin(), from.end());
  while (!todo.empty()) {
    const GraphNode* n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    for (const GraphNode* d : n->deps) todo.push_back(d);
  }
  return seen;
}

}  // namespace

Capture* find_capture_locked(std::uint64_t id) {
  if (id == 0) return nullptr;
  for (Capture* c : driver().captures)
    if (c->id == id) return c;
  return nullptr;
}

GraphNode* capture_node_locked(Stream* s, CUgraphNodeType type) {
  GraphNode* n = add_node_locked(s->capture->graph, type, reinterpret_cast<const CUgraphNode*>(s->capture_deps.data()),
                                 s->capture_deps.size());
  s->capture_deps.assign(1, n);
  return n;
}

CUresult capture_submit_check_locked(Stream* s, const char* function) {
  if (s->capture && s->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  return legacy_check_locked(s, function);
}

CUresult capture_unsafe_check_locked(const char* function) {
  const CUstreamCaptureMode mode = thread_calls(function).capture_mode;
  if (mode == CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_SUCCESS;
  const std::thread::id self = std::this_thread::get_id();
  std::vector<Capture*> conflicts;
  for (Capture* c : driver().captures) {
    const bool own = c->thread == self && c->mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    const bool others_global =
        c->thread != self && c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && mode == CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (own || others_global) conflicts.push_back(c);
  }
  if (conflicts.empty()) return CUDA_SUCCESS;
  const bool own = conflicts.front()->thread == self;
  for (Capture* c : conflicts) invalidate_locked(c);
  report_violation(function, std::string("a potentially unsafe call by a thread in the ") + mode_name(mode) +
                                 " capture mode while " +
                                 (own ? "it was capturing itself" : "another thread was capturing in the global mode"));
  return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
}

CUresult capture_sync_check_locked(Stream* s, const char* function) {
  if (s->capture) {
    invalidate_locked(s->capture);
    report_violation(function, "a query or synchronisation of a stream that is capturing");
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  if (CUresult r = legacy_check_locked(s, function)) return r;
  return capture_unsafe_check_locked(function);
}

CUresult capture_event_check_locked(Event* e, const char* function) {
  if (Capture* c = find_capture_locked(e->captured_id)) {
    invalidate_locked(c);
    report_violation(function, "a query or synchronisation of an event recorded in a capture");
    return CUDA_ERROR_CAPTURED_EVENT;
  }
  return capture_unsafe_check_locked(function);
}

CUresult capture_context_check_locked(Context* ctx, const char* function) {
  bool any = false;
  for (Capture* c : driver().captures)
    for (Stream* s : c->streams)
      if (s->ctx == ctx) invalidate_locked(c), any = true;
  if (any) {
    report_violation(function, "a synchronisation of a context with a stream that is capturing");
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return capture_unsafe_check_locked(function);
}

CUresult capture_begin_locked(Stream* s, CUstreamCaptureMode mode, Graph* into, const CUgraphNode* deps,
                              std::size_t ndeps) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // the legacy stream cannot be captured
  if (s->capture) return CUDA_ERROR_ILLEGAL_STATE;
  Driver& g = driver();
  auto* c = new Capture();
  c->id = g.next_id++;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = s;
  c->streams.push_back(s);
  if (into) {
    c->graph = into;
    c->user_graph = true;
  } else {
    c->graph = new Graph();
    add_live_locked(c->graph);
  }
  g.captures.push_back(c);
  s->capture = c;
  s->capture_deps.assign(reinterpret_cast<GraphNode* const*>(deps), reinterpret_cast<GraphNode* const*>(deps) + ndeps);
  return CUDA_SUCCESS;
}

CUresult capture_end_locked(Stream* s, CUgraph* out) {
  Capture* c = s->capture;
  if (!c) return CUDA_ERROR_ILLEGAL_STATE;
  if (c->origin != s) {
    invalidate_locked(c);
    return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  }
  if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != std::this_thread::get_id())
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  CUresult result = c->invalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
  if (result == CUDA_SUCCESS) {
    // Every joined stream's work must lead into the origin's.
    const std::set<const GraphNode*> joined_back = ancestors(s->capture_deps);
    for (Stream* other : c->streams) {
      if (other == s) continue;
      for (GraphNode* n : other->capture_deps)
        if (!joined_back.count(n)) result = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
  }
  for (Stream* member : c->streams) leave_capture_locked(member);
  Driver& g = driver();
  g.captures.erase(std::find(g.captures.begin(), g.captures.end(), c));
  if (result == CUDA_SUCCESS) {
    *out = reinterpret_cast<CUgraph>(c->graph);
  } else {
    if (!c->user_graph) destroy_graph_locked(c->graph);
    *out = nullptr;
  }
  delete c;
  return result;
}

void capture_record_event_locked(Stream* s, Event* e) {
  e->captured_id = s->capture->id;
  e->captured_deps = s->capture_deps;
}

CUresult capture_wait_event_locked(Stream* s, Event* e, unsigned flags, bool* handled) {
  Capture* from = find_capture_locked(e->captured_id);
  *handled = s->capture != nullptr || from != nullptr;
  if (!*handled) return CUDA_SUCCESS;
  if (s->capture && s->capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (!from) {
    // A capturing stream waits on ordinary work: a dependency across the capture's boundary, which
    // only an external wait node may express.
    if (flags & CU_EVENT_WAIT_EXTERNAL) return CUDA_SUCCESS;
    invalidate_locked(s->capture);
    report_violation("cuStreamWaitEvent", "a capturing stream waited on an event recorded outside the capture");
    return CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
  }
  if (!s->capture) {  // joins the capture
    if (s->legacy) {
      invalidate_locked(from);
      report_violation("cuStreamWaitEvent", "the legacy stream waited on a captured event");
      return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    s->capture = from;
    from->streams.push_back(s);
    s->capture_deps = e->captured_deps;
    return CUDA_SUCCESS;
  }
  if (s->capture != from) {
    invalidate_locked(s->capture);
    invalidate_locked(from);
    report_violation("cuStreamWaitEvent", "a stream of one capture waited on an event of another");
    return CUDA_ERROR_STREAM_CAPTURE_MERGE;
  }
  for (GraphNode* n : e->captured_deps)
    if (std::find(s->capture_deps.begin(), s->capture_deps.end(), n) == s->capture_deps.end())
      s->capture_deps.push_back(n);
  return CUDA_SUCCESS;
}

void capture_stream_destroyed_locked(Stream* s) {
  Capture* c = s->capture;
  if (!c) return;
  invalidate_locked(c);
  report_violation("cuStreamDestroy", "a stream was destroyed while it was capturing");
  if (c->origin == s) {  // nothing can end it any more
    for (Stream* member : c->streams) leave_capture_locked(member);
    Driver& g = driver();
    g.captures.erase(std::find(g.captures.begin(), g.captures.end(), c));
    if (!c->user_graph) destroy_graph_locked(c->graph);
    delete c;
    return;
  }
  std::erase(c->streams, s);
  leave_capture_locked(s);
}

}  // namespace simgpu

using namespace simgpu;

namespace {

CUresult begin(CUstream hs, CUstreamCaptureMode mode, CUgraph into, const CUgraphNode* deps, std::size_t ndeps,
               bool pt) {
  if (ndeps && !deps) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hs, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  Graph* graph = nullptr;
  if (into) {
    graph = reinterpret_cast<Graph*>(into);
    if (!is_live_locked(graph)) return CUDA_ERROR_INVALID_VALUE;
  }
  for (std::size_t i = 0; i < ndeps; ++i)
    if (!is_live_locked(reinterpret_cast<GraphNode*>(deps[i]))) return CUDA_ERROR_INVALID_VALUE;
  return capture_begin_locked(s, mode, graph, deps, ndeps);
}

CUresult end(CUstream hs, CUgraph* out, bool pt) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hs, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  return capture_end_locked(s, out);
}

// cuStreamIsCapturing and cuStreamGetCaptureInfo: the documented way to ask, legal during capture.
// On the legacy stream while a blocking stream captures they answer CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
// without invalidating anything.
CUresult capture_info(CUstream hs, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                      const CUgraphEdgeData** edges, size_t* ndeps, bool pt) {
  if (!st) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(hs, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  if (s->legacy && !blocking_captures_locked(s->ctx).empty()) return CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  Capture* c = s->capture;
  *st = !c               ? CU_STREAM_CAPTURE_STATUS_NONE
        : c->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                         : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (id && c) *id = c->id;
  if (graph) *graph = c ? reinterpret_cast<CUgraph>(c->graph) : nullptr;
  // The dependencies: owned by the stream, valid until its next captured call (as documented).
  if (deps)
    *deps = c && !s->capture_deps.empty() ? reinterpret_cast<const CUgraphNode*>(s->capture_deps.data()) : nullptr;
  if (edges) *edges = nullptr;
  if (ndeps) *ndeps = c ? s->capture_deps.size() : 0;
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

#define SIM_CAPTURE_FAMILY(SUFFIX, PT)                                                                                \
  CUresult cuStreamBeginCapture_v2##SUFFIX(CUstream s, CUstreamCaptureMode m) {                                       \
    return begin(s, m, nullptr, nullptr, 0, PT);                                                                      \
  }                                                                                                                   \
  CUresult cuStreamBeginCapture##SUFFIX(CUstream s) {                                                                 \
    return begin(s, CU_STREAM_CAPTURE_MODE_GLOBAL, nullptr, nullptr, 0, PT);                                          \
  }                                                                                                                   \
  CUresult cuStreamBeginCaptureToGraph##SUFFIX(CUstream s, CUgraph g, const CUgraphNode* d, const CUgraphEdgeData* e, \
                                               size_t n, CUstreamCaptureMode m) {                                     \
    if (e) return CUDA_ERROR_NOT_SUPPORTED; /* edge data is not simulated */                                          \
    if (!g) return CUDA_ERROR_INVALID_VALUE;                                                                          \
    return begin(s, m, g, d, n, PT);                                                                                  \
  }                                                                                                                   \
  CUresult cuStreamEndCapture##SUFFIX(CUstream s, CUgraph* g) { return end(s, g, PT); }                               \
  CUresult cuStreamIsCapturing##SUFFIX(CUstream s, CUstreamCaptureStatus* st) {                                       \
    return capture_info(s, st, nullptr, nullptr, nullptr, nullptr, nullptr, PT);                                      \
  }                                                                                                                   \
  CUresult cuStreamGetCaptureInfo##SUFFIX(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id) {                    \
    return capture_info(s, st, id, nullptr, nullptr, nullptr, nullptr, PT);                                           \
  }                                                                                                                   \
  CUresult cuStreamGetCaptureInfo_v2##SUFFIX(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,       \
                                             const CUgraphNode** d, size_t* n) {                                      \
    return capture_info(s, st, id, g, d, nullptr, n, PT);                                                             \
  }                                                                                                                   \
  CUresult cuStreamGetCaptureInfo_v3##SUFFIX(CUstream s, CUstreamCaptureStatus* st, cuuint64_t* id, CUgraph* g,       \
                                             const CUgraphNode** d, const CUgraphEdgeData** e, size_t* n) {           \
    return capture_info(s, st, id, g, d, e, n, PT);                                                                   \
  }

SIM_CAPTURE_FAMILY(, false)
SIM_CAPTURE_FAMILY(_ptsz, true)

CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (CUresult r = ensure_initialized()) return r;
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  const CUstreamCaptureMode next = *mode;
  if (next != CU_STREAM_CAPTURE_MODE_GLOBAL && next != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      next != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode& current = thread_calls().capture_mode;
  *mode = current;
  current = next;
  return CUDA_SUCCESS;
}

}  // extern "C"

namespace simgpu {

CUresult unsafe_call_check(const char* function) {
  std::lock_guard<std::mutex> lk(driver().mu);
  return capture_unsafe_check_locked(function);
}

}  // namespace simgpu
