// Streams, events, host functions and stream callbacks.
#include <algorithm>

#include "capture.h"
#include "drv_thread.h"

namespace simgpu {

CUresult resolve_stream(CUstream handle, bool per_thread_default, Stream** out, const char* function) {
  if (CUresult r = ensure_initialized(function)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  return resolve_stream_locked(handle, per_thread_default, out, function);
}

CUresult resolve_stream_locked(CUstream handle, bool per_thread_default, Stream** out, const char* function) {
  // A created stream names its context itself: no current context is needed (another thread may
  // end a relaxed capture, or query, with none).
  const bool default_stream = handle == nullptr || handle == CU_STREAM_LEGACY || handle == CU_STREAM_PER_THREAD;
  if (!default_stream) {
    auto* s = reinterpret_cast<Stream*>(handle);
    if (!is_live_locked(s)) return CUDA_ERROR_INVALID_HANDLE;
    *out = s;
    return CUDA_SUCCESS;
  }
  Context* c = nullptr;
  if (CUresult r = current_context_locked(&c, function)) return r;
  Driver& g = driver();
  if (handle == CU_STREAM_PER_THREAD || (handle == nullptr && per_thread_default)) {
    PerThreadStream& pt = thread_streams(function).by_context[c];
    // The remembered stream is destroyed with its context (a primary context that is released and
    // retained again keeps its address), and its memory may then hold another object, even another
    // live handle: is_live() cannot tell. Only a stream still listed in the context, with the id
    // it was made with, is this thread's stream; otherwise make a new one.
    const auto& listed = c->streams;
    if (!pt.stream || std::find(listed.begin(), listed.end(), pt.stream) == listed.end() || pt.stream->id != pt.id) {
      auto* s = new Stream();
      s->ctx = c;
      s->id = g.next_id++;
      c->streams.push_back(s);
      add_live_locked(s);
      pt = PerThreadStream{s, s->id};
    }
    *out = pt.stream;
    return CUDA_SUCCESS;
  }
  *out = c->null_stream;
  return CUDA_SUCCESS;
}

}  // namespace simgpu

using namespace simgpu;

namespace {

// One property of a stream: resolves the handle (0, legacy, per-thread or created) and reads it.
template <class Out, class Read>
CUresult stream_property(CUstream h, bool per_thread, Out* out, Read read) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(h, per_thread, &s)) return r;
  *out = read(*s);
  return CUDA_SUCCESS;
}

CUresult create_stream(CUstream* ph, unsigned flags, int priority) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~static_cast<unsigned>(CU_STREAM_NON_BLOCKING)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto* s = new Stream();
  s->ctx = c;
  s->flags = flags;
  s->priority = priority > 0 ? 0 : (priority < -5 ? -5 : priority);  // clamped to the range, as the driver does
  s->id = g.next_id++;
  c->streams.push_back(s);
  add_live_locked(s);
  *ph = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}

CUresult stream_query(CUstream h, bool pt) {
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  if (CUresult r = capture_sync_check_locked(s, "cuStreamQuery")) return r;
  return s->queue.empty() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult stream_sync(CUstream h, bool pt) {
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  return stream_synchronize(s, "cuStreamSynchronize");
}

CUresult stream_wait_event(CUstream h, CUevent ev, unsigned flags, bool pt) {
  if (flags & ~1u) return CUDA_ERROR_INVALID_VALUE;
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto* e = reinterpret_cast<Event*>(ev);
  if (!is_live_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
  bool captured = false;
  if (CUresult r = capture_wait_event_locked(s, e, flags, &captured)) return r;
  if (captured) return CUDA_SUCCESS;  // a dependency in the graph being captured, no stream work
  if (CUresult r = capture_submit_check_locked(s, "cuStreamWaitEvent")) return r;
  if (e->recorded == 0 || e->completed >= e->recorded) return CUDA_SUCCESS;  // nothing to wait for
  Op op;
  op.kind = Op::Kind::wait_event;
  op.event = e;
  op.event_generation = e->recorded;
  enqueue_locked(s, std::move(op));
  return CUDA_SUCCESS;
}

// cuLaunchHostFunc (captured as a host node) and cuStreamAddCallback (not allowed in a capture).
CUresult add_host_call(CUstream h, std::function<void()> fn, CUhostFn node_fn, void* node_data, bool pt,
                       const char* function) {
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  if (CUresult r = capture_submit_check_locked(s, function)) return r;
  if (s->capture) {
    if (!node_fn) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    GraphNode* n = capture_node_locked(s, CU_GRAPH_NODE_TYPE_HOST);
    n->host_fn = node_fn;
    n->host_data = node_data;
    return CUDA_SUCCESS;
  }
  Op op;
  op.kind = Op::Kind::host;
  op.host = [fn = std::move(fn)] { run_host_function(fn); };
  enqueue_locked(s, std::move(op));
  if (Machine* m = driver().machine; m != nullptr)
    if (const int slot = m->slot(); slot >= 0) m->state().slots[slot].dev[s->ctx->device].host_functions.fetch_add(1);
  return CUDA_SUCCESS;
}

CUresult event_record(CUevent ev, CUstream h, bool pt) {
  Stream* s = nullptr;
  if (CUresult r = resolve_stream(h, pt, &s)) return r;
  Driver& g = driver();
  std::lock_guard<std::mutex> lk(g.mu);
  auto* e = reinterpret_cast<Event*>(ev);
  if (!is_live_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = capture_submit_check_locked(s, "cuEventRecord")) return r;
  if (s->capture) {
    capture_record_event_locked(s, e);
    return CUDA_SUCCESS;
  }
  e->captured_id = 0;
  e->captured_deps.clear();
  Op op;
  op.kind = Op::Kind::event_record;
  op.event = e;
  op.event_generation = e->recorded + 1;
  enqueue_locked(s, std::move(op));
  return CUDA_SUCCESS;
}

}  // namespace

extern "C" {

CUresult cuStreamCreate(CUstream* ph, unsigned int flags) { return create_stream(ph, flags, 0); }
CUresult cuStreamCreateWithPriority(CUstream* ph, unsigned int flags, int priority) {
  return create_stream(ph, flags, priority);
}

CUresult cuStreamDestroy_v2(CUstream h) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* s = reinterpret_cast<Stream*>(h);
  if (!is_live_locked(s) || s->legacy) return CUDA_ERROR_INVALID_HANDLE;
  capture_stream_destroyed_locked(s);
  destroy_stream_locked(s);
  return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream h) { return stream_query(h, false); }
CUresult cuStreamQuery_ptsz(CUstream h) { return stream_query(h, true); }
CUresult cuStreamSynchronize(CUstream h) { return stream_sync(h, false); }
CUresult cuStreamSynchronize_ptsz(CUstream h) { return stream_sync(h, true); }
CUresult cuStreamWaitEvent(CUstream h, CUevent e, unsigned int f) { return stream_wait_event(h, e, f, false); }
CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int f) { return stream_wait_event(h, e, f, true); }

#define SIM_STREAM_GETTERS(SUFFIX, PT)                                                                        \
  CUresult cuStreamGetPriority##SUFFIX(CUstream h, int* p) {                                                  \
    return stream_property(h, PT, p, [](const Stream& s) { return s.priority; });                             \
  }                                                                                                           \
  CUresult cuStreamGetFlags##SUFFIX(CUstream h, unsigned int* f) {                                            \
    return stream_property(h, PT, f, [](const Stream& s) { return s.flags; });                                \
  }                                                                                                           \
  CUresult cuStreamGetCtx##SUFFIX(CUstream h, CUcontext* c) {                                                 \
    return stream_property(h, PT, c, [](const Stream& s) { return reinterpret_cast<CUcontext>(s.ctx); });     \
  }                                                                                                           \
  CUresult cuStreamGetId##SUFFIX(CUstream h, unsigned long long* id) {                                        \
    return stream_property(h, PT, id, [](const Stream& s) { return static_cast<unsigned long long>(s.id); }); \
  }                                                                                                           \
  CUresult cuStreamGetDevice##SUFFIX(CUstream h, CUdevice* d) {                                               \
    return stream_property(h, PT, d, [](const Stream& s) { return ordinal_of(s.ctx->device); });              \
  }                                                                                                           \
  CUresult cuLaunchHostFunc##SUFFIX(CUstream h, CUhostFn fn, void* data) {                                    \
    if (!fn) return CUDA_ERROR_INVALID_VALUE;                                                                 \
    return add_host_call(                                                                                     \
        h, [fn, data] { fn(data); }, fn, data, PT, "cuLaunchHostFunc");                                       \
  }                                                                                                           \
  CUresult cuStreamAddCallback##SUFFIX(CUstream h, CUstreamCallback cb, void* data, unsigned int flags) {     \
    if (!cb || flags != 0) return CUDA_ERROR_INVALID_VALUE;                                                   \
    return add_host_call(                                                                                     \
        h, [cb, data, h] { cb(h, CUDA_SUCCESS, data); }, nullptr, nullptr, PT, "cuStreamAddCallback");        \
  }                                                                                                           \
  CUresult cuEventRecord##SUFFIX(CUevent e, CUstream h) { return event_record(e, h, PT); }                    \
  CUresult cuEventRecordWithFlags##SUFFIX(CUevent e, CUstream h, unsigned int f) {                            \
    if (f & ~1u) return CUDA_ERROR_INVALID_VALUE;                                                             \
    return event_record(e, h, PT);                                                                            \
  }

SIM_STREAM_GETTERS(, false)
SIM_STREAM_GETTERS(_ptsz, true)

CUresult cuStreamGetCtx_v2(CUstream h, CUcontext* c, CUgreenCtx* green) {
  if (green) *green = nullptr;
  return SIM_EXPORT_CALL(cuStreamGetCtx)(h, c);
}
CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext* c, CUgreenCtx* green) {
  if (green) *green = nullptr;
  return SIM_EXPORT_CALL(cuStreamGetCtx_ptsz)(h, c);
}

CUresult cuEventCreate(CUevent* ph, unsigned int flags) {
  if (!ph) return CUDA_ERROR_INVALID_VALUE;
  if (flags & ~0xFu) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_context(&c)) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* e = new Event();
  e->ctx = c;
  e->flags = flags;
  add_live_locked(e);
  *ph = reinterpret_cast<CUevent>(e);
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent ev) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* e = reinterpret_cast<Event*>(ev);
  if (!is_live_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
  remove_live_locked(e);
  // Queued records and waits may still refer to it; the few bytes are not reclaimed.
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent ev) {
  if (CUresult r = ensure_initialized()) return r;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* e = reinterpret_cast<Event*>(ev);
  if (!is_live_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = capture_event_check_locked(e, "cuEventQuery")) return r;
  return e->completed >= e->recorded ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent ev) {
  if (CUresult r = ensure_initialized()) return r;
  Driver& g = driver();
  std::unique_lock<std::mutex> lk(g.mu);
  auto* e = reinterpret_cast<Event*>(ev);
  if (!is_live_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult r = capture_event_check_locked(e, "cuEventSynchronize")) return r;
  const std::uint64_t target = e->recorded;
  g.done_cv.wait(lk, [&] { return e->completed >= target; });
  const int device = e->ctx->device;
  lk.unlock();
  // Pools give memory above their release threshold back at a stream, event or context
  // synchronisation (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD): this is the event one.
  pool_trim_at_sync(device);
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (CUresult r = ensure_initialized()) return r;
  if (!ms) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lk(driver().mu);
  auto* a = reinterpret_cast<Event*>(start);
  auto* b = reinterpret_cast<Event*>(end);
  if (!is_live_locked(a) || !is_live_locked(b)) return CUDA_ERROR_INVALID_HANDLE;
  if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
  if (a->recorded == 0 || b->recorded == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (a->completed < a->recorded || b->completed < b->recorded) return CUDA_ERROR_NOT_READY;
  *ms = static_cast<float>((static_cast<double>(b->time_ns) - static_cast<double>(a->time_ns)) / 1e6);
  return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) { return cuEventElapsedTime_v2(ms, start, end); }

}  // extern "C"
