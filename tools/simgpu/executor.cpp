// The device side of streams: one thread per device in each process runs the queued work of all its
// streams in order, kernels in device time through the DeviceRunner, everything else at once.
#include <sys/prctl.h>

#include <algorithm>

#include <thread>

#include "capture.h"

namespace simgpu {

struct DeviceExecutor {
  int device = 0;
  std::condition_variable cv;  // new work or an event completed
  DeviceRunner runner;
  explicit DeviceExecutor(int d) : device(d), runner(*driver().machine, d) {}
};

namespace {

// Completion may be reported a little before the device clock when more kernels are queued behind,
// so a stream of short kernels runs without a sleep per kernel.
constexpr std::uint64_t kCompletionLeadNs = 200'000;

// Legacy NULL-stream semantics: work on the NULL stream waits for earlier work on every blocking
// stream of its context, and work on a blocking stream waits for earlier NULL-stream work.
bool ordered_after_legacy_locked(const Stream* s, const Op& op) {
  Context* c = s->ctx;
  if (s->legacy) {
    for (Stream* o : c->streams)
      if (!(o->flags & CU_STREAM_NON_BLOCKING) && !o->queue.empty() && o->queue.front().seq < op.seq) return true;
    return false;
  }
  if (s->flags & CU_STREAM_NON_BLOCKING) return false;
  Stream* n = c->null_stream;
  return n && !n->queue.empty() && n->queue.front().seq < op.seq;
}

bool op_ready_locked(const Stream* s, const Op& op) {
  if (op.kind == Op::Kind::wait_event && op.event->completed < op.event_generation) return false;
  return !ordered_after_legacy_locked(s, op);
}

// All streams with work on `device`. Streams register themselves in this list when they get work.
std::vector<Stream*>& busy_streams(int device) {
  // Never destroyed: the executor threads run on while the process exits (a static array here was
  // destroyed under them by exit's destructors when an atexit handler took a while).
  static auto* lists = new std::vector<Stream*>[kMaxDevices];
  return lists[device];
}

Stream* pick_locked(int device) {
  Stream* best = nullptr;
  auto& list = busy_streams(device);
  for (std::size_t i = 0; i < list.size();) {
    Stream* s = list[i];
    if (s->queue.empty()) {
      s->in_busy_list = false;
      list[i] = list.back();
      list.pop_back();
      continue;
    }
    ++i;
    if (s->head_running) continue;
    const Op& op = s->queue.front();
    if (!op_ready_locked(s, op)) continue;
    if (!best || op.seq < best->queue.front().seq) best = s;
  }
  return best;
}

bool kernel_ready_locked(int device) {
  Stream* s = pick_locked(device);
  return s && s->queue.front().kind == Op::Kind::kernel;
}

void executor_main(DeviceExecutor* ex) {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // wake-ups on time to the microsecond: device time is the truth
  Driver& g = driver();
  Machine& m = *g.machine;
  std::unique_lock<std::mutex> lk(g.mu);
  for (;;) {
    Stream* s = pick_locked(ex->device);
    if (!s) {
      if (ex->runner.holds_device()) {
        lk.unlock();
        ex->runner.idle();
        lk.lock();
        continue;
      }
      ex->cv.wait(lk);
      continue;
    }
    s->head_running = true;
    Op& op = s->queue.front();
    const Op::Kind kind = op.kind;
    const std::uint64_t ns = op.kernel_ns;
    const std::uint64_t enqueued = op.enqueued_ns;
    // An event completes when the stream's earlier work has finished on the device.
    std::uint64_t finished = std::max(enqueued, s->finished_ns);
    std::function<void()> host = std::move(op.host);
    lk.unlock();
    if (kind == Op::Kind::kernel) {
      finished = ex->runner.run(ns, enqueued);
      if (const int slot = m.slot(); slot >= 0) m.state().slots[slot].dev[ex->device].kernels.fetch_add(1);
      m.state().devices[ex->device].kernels.fetch_add(1);
    } else if (kind == Op::Kind::host && host) {
      host();
      finished = monotonic_ns();
    }
    lk.lock();
    if (kind == Op::Kind::kernel || kind == Op::Kind::event_record) {
      // Report completion no earlier than the device finishes, unless more kernels follow at once.
      const std::uint64_t now = monotonic_ns();
      // More kernels, that is: a host function or an event after it must not see this one done
      // before the device finished it (a host function runs at once, on the host).
      const bool more =
          (s->queue.size() > 1 && s->queue[1].kind == Op::Kind::kernel) || kernel_ready_locked(ex->device);
      if (finished > now && !(more && finished - now < kCompletionLeadNs)) {
        // With more work queued, stay half a lead ahead of the device so its clock never waits on
        // our wake-up; with none, report completion exactly when the device finishes.
        lk.unlock();
        DeviceRunner::sleep_until(more ? finished - kCompletionLeadNs / 2 : finished);
        lk.lock();
      }
    }
    Op& done = s->queue.front();
    if (done.kind == Op::Kind::event_record) {
      Event* e = done.event;
      if (e->completed < done.event_generation) {
        e->completed = done.event_generation;
        e->time_ns = finished;
      }
      for (DeviceExecutor* other : g.executors)
        if (other && other != ex) other->cv.notify_all();  // a wait on another device may now be ready
    }
    const bool was_record = done.kind == Op::Kind::event_record;
    if (finished > s->finished_ns) s->finished_ns = finished;
    s->queue.pop_front();
    s->head_running = false;
    // Host threads wait for a stream to drain or an event to complete: wake them only then, so a
    // long queue of short kernels costs no wake-up per kernel.
    if (was_record || s->queue.empty()) g.done_cv.notify_all();
  }
}

DeviceExecutor* executor_locked(int device) {
  Driver& g = driver();
  if (!g.executors[device]) {
    auto* ex = new DeviceExecutor(device);
    g.executors[device] = ex;
    std::thread(executor_main, ex).detach();
  }
  return g.executors[device];
}

}  // namespace

void enqueue_locked(Stream* s, Op op) {
  Driver& g = driver();
  op.seq = g.next_seq++;
  op.enqueued_ns = monotonic_ns();
  if (op.kind == Op::Kind::event_record) op.event->recorded = op.event_generation;
  s->queue.push_back(std::move(op));
  const int device = s->ctx->device;
  if (!s->in_busy_list) {
    s->in_busy_list = true;
    busy_streams(device).push_back(s);
  }
  executor_locked(device)->cv.notify_one();
}

void enqueue(Stream* s, Op op) {
  std::lock_guard<std::mutex> lk(driver().mu);
  enqueue_locked(s, std::move(op));
}

bool context_idle_locked(Context* c) {
  if (c->null_stream && !c->null_stream->queue.empty()) return false;
  for (Stream* s : c->streams)
    if (!s->queue.empty()) return false;
  return true;
}

CUresult stream_synchronize(Stream* s, const char* function) {
  Driver& g = driver();
  {
    std::unique_lock<std::mutex> lk(g.mu);
    if (CUresult r = capture_sync_check_locked(s, function)) return r;
    // Legacy semantics: syncing the NULL stream waits for the blocking streams' earlier work too.
    g.done_cv.wait(lk, [&] {
      if (!s->queue.empty()) return false;
      if (s->legacy) {
        for (Stream* o : s->ctx->streams)
          if (!(o->flags & CU_STREAM_NON_BLOCKING) && !o->queue.empty()) return false;
      }
      return true;
    });
  }
  pool_trim_at_sync(s->ctx->device);
  return CUDA_SUCCESS;
}

CUresult context_synchronize(Context* c, const char* function) {
  Driver& g = driver();
  {
    std::unique_lock<std::mutex> lk(g.mu);
    if (function != nullptr)
      if (CUresult r = capture_context_check_locked(c, function)) return r;
    g.done_cv.wait(lk, [&] { return context_idle_locked(c); });
  }
  pool_trim_at_sync(c->device);
  return CUDA_SUCCESS;
}

void destroy_stream_locked(Stream* s) {
  // Work already queued still runs (as on the real driver); the object stays until it is drained.
  remove_live_locked(s);
  if (s->ctx) {
    auto& v = s->ctx->streams;
    for (auto it = v.begin(); it != v.end(); ++it)
      if (*it == s) {
        v.erase(it);
        break;
      }
  }
  if (s->queue.empty()) {
    auto& list = busy_streams(s->ctx->device);
    for (auto it = list.begin(); it != list.end(); ++it)
      if (*it == s) {
        list.erase(it);
        break;
      }
    delete s;
  }
  // A destroyed stream with queued work is left to run out; it is then unreachable and leaks a few
  // bytes, which is the price of never blocking cuStreamDestroy.
}

}  // namespace simgpu
