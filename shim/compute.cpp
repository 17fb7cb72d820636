#include "compute.h"

#include <time.h>

#include <algorithm>
#include <map>
#include <string>

#include "capture.h"
#include "compute_board.h"
#include "crash_handler.h"
#include "coordinator_layout.h"
#include "log.h"
#include "reconcile.h"
#include "session.h"
#include "share_policy.h"
#include "shim.h"

namespace slice::shim {
namespace {

// How often the watcher looks while this process has work or waits (faster while it drains for
// someone else: the gap between two tenants' turns is the device idling).
constexpr std::uint64_t kTickNs = 500'000;         // has work, holds its turn
constexpr std::uint64_t kWaitTickNs = 100'000;     // a thread waits at the gate for its turn
constexpr std::uint64_t kDrainTickNs = 50'000;     // drains, for someone else: the device idles meanwhile
constexpr std::uint64_t kIdleTickNs = 2'000'000;
// How long a launch may be held at a closed gate before it goes anyway: no wait without an end.
constexpr std::uint64_t kGateDeadlineNs = 2'000'000'000;
// Work this process may queue ahead when others want the device, in device time.
constexpr std::uint64_t kQueueAheadNs = 8'000'000;

std::uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

void sleep_ns(std::uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000ull), static_cast<long>(ns % 1'000'000'000ull)};
  nanosleep(&ts, nullptr);
}

int rank(Priority p) { return p == Priority::high ? 2 : p == Priority::normal ? 1 : 0; }

}  // namespace

struct Compute::Watch {
  struct Lane {
    std::uint64_t liveness_checked_ns = 0;
    bool was_active = false;          // over the step that ends now
    DeviceTimeEstimator estimate;     // what this process received there
    std::vector<TenantCompute> board_rows;
    CUcontext current = nullptr;       // what the watcher thread has made current
    std::uint64_t traced_ns = 0;
  };
  ComputeBoard board;
  std::vector<Lane> lanes;
  SharePolicy policy;
  Watch(const std::string& dir, const std::string& tenant, std::size_t n) : board(dir, tenant), lanes(n) {}
};

Compute::Compute(Session& s)
    : session_(s), lanes_(new ComputeLane[std::max<std::size_t>(s.devices.size(), 1)]),
      watch_(std::make_unique<Watch>(s.config.coordinator_dir, s.config.tenant, std::max<std::size_t>(s.devices.size(), 1))) {}

Compute::~Compute() { stop(); }

void Compute::use(int device) {
  lanes_[device].used.store(true, std::memory_order_release);
  std::call_once(started_, [this] {
    try {
      watcher_ = std::thread([this] { run(); });
    } catch (...) {
      log::error("libslice could not start its compute watcher; compute shares are not enforced");
    }
  });
}

void Compute::stop() {
  if (stop_.exchange(true)) return;
  if (watcher_.joinable()) watcher_.join();
}

void Compute::run() {
  load_crash_unwinder();  // off the start-up path: see crash_handler.h
  // This thread's calls must never count against another thread's capture: in the relaxed mode only
  // what necessarily conflicts with a capture is prohibited to it (and that it never does: capture.h).
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (const auto exchange = SLICE_REAL_CU(cuThreadExchangeStreamCaptureMode)) exchange(&relaxed);
  while (!stop_.load(std::memory_order_relaxed)) {
    const std::uint64_t now = monotonic_ns();
    capture_forget_ended();
    for (std::size_t d = 0; d < session_.devices.size(); ++d) reconcile(session_, static_cast<int>(d), kReconcileTickNs);
    bool busy = false, draining = false, waiting = false;
    for (std::size_t d = 0; d < session_.devices.size(); ++d) {
      ComputeLane& lane = lanes_[d];
      if (!lane.used.load(std::memory_order_acquire)) continue;
      tick(static_cast<int>(d), now);
      busy |= lane.since_drain.load(std::memory_order_relaxed) != 0 || lane.waiting.load(std::memory_order_relaxed) != 0;
      draining |= lane.since_drain.load(std::memory_order_relaxed) != 0 && !lane.open.load(std::memory_order_relaxed);
      waiting |= lane.waiting.load(std::memory_order_relaxed) != 0;
    }
    sleep_ns(draining ? kDrainTickNs : waiting ? kWaitTickNs : busy ? kTickNs : kIdleTickNs);
  }
}

void Compute::tick(int device, std::uint64_t now) {
  ComputeLane& lane = lanes_[device];
  Watch::Lane& w = watch_->lanes[device];
  Coordinator& c = *session_.coordinator;
  DeviceEntry& entry = c.device_entry(device);

  // 1. Has this process still work on the device?
  if (lane.since_drain.load(std::memory_order_acquire) != 0) poll_drain(lane, nullptr, &w.current);
  const std::uint32_t launched = lane.since_drain.load(std::memory_order_acquire);
  const bool active = launched != 0;
  const bool wanting = lane.waiting.load(std::memory_order_acquire) != 0;

  // 2. Publish it for the others, and credit the step that ends now.
  const bool check_liveness = now >= w.liveness_checked_ns + 100000000;
  if (check_liveness) w.liveness_checked_ns = now;
  c.publish_compute(device, (active ? kSlotActive : 0) | (wanting ? kSlotWanting : 0), check_liveness);
  if (active) entry.active_heartbeat_ns.store(now, std::memory_order_relaxed);
  if (wanting) entry.wanting_heartbeat_ns.store(now, std::memory_order_relaxed);
  const Coordinator::ComputeSettings settings = c.publish_compute_settings(device);

  watch_->board.read(session_.devices[device].uuid.data(), now, watch_->policy.window_ns, w.board_rows);
  // The step that ends now, shared among the tenants with work then and this tenant's processes.
  unsigned tenants = 1;
  for (const TenantCompute& t : w.board_rows) tenants += t.active;
  const unsigned processes = std::max(1u, entry.active_processes.load(std::memory_order_relaxed));
  const std::uint64_t credited = w.estimate.received_ns();
  w.estimate.step(now, w.was_active, tenants * processes);
  entry.received_ns.fetch_add(w.estimate.received_ns() - credited, std::memory_order_relaxed);
  w.was_active = active;
  const std::uint64_t received = entry.received_ns.load(std::memory_order_relaxed);
  ReceivedHistory& history = c.received_history(device);
  record_history(history, received, now);

  // 3. Decide, on the same figures every other process uses (the tenants' shared histories).
  std::vector<TenantLoad> others;
  // The queue is kept short only for those who may take the device from us: tenants of our
  // priority or above that want it (a lower one waits for us anyway), or our own limit.
  bool contended = settings.limit < 100, higher_present = false;
  for (const TenantCompute& t : w.board_rows) {
    others.push_back({t.share, t.limit, t.priority, t.window_received_ns, t.active || t.wanting, t.active});
    const bool wants = t.active || t.wanting;
    contended |= wants && rank(t.priority) >= rank(settings.priority);
    // A higher priority that used the device within the window will likely want it again soon: its
    // next request must not wait behind a deep queue of ours, so ours stays one launch deep.
    // So does one that joined within the window: its first request should not wait either.
    higher_present |= (wants || t.window_received_ns != 0 || joined_within(t, now, watch_->policy.window_ns)) &&
                      rank(t.priority) > rank(settings.priority);
  }
  contended |= higher_present;
  const bool tenant_active = entry.active_processes.load(std::memory_order_relaxed) != 0;
  const TenantLoad me{settings.share, settings.limit, settings.priority,
                      std::min(received_over(history, received, now, watch_->policy.window_ns), watch_->policy.window_ns),
                      true, tenant_active};
  const Verdict verdict = watch_->policy.decide(me, others);
  std::uint32_t budget = ~0u;
  if (contended) {
    const std::uint64_t per = std::max<std::uint64_t>(lane.per_launch_ns.load(std::memory_order_relaxed), 1);
    budget = higher_present ? 1 : static_cast<std::uint32_t>(std::clamp<std::uint64_t>(kQueueAheadNs / per, 1, 64));
  }
  lane.budget.store(budget, std::memory_order_relaxed);
  lane.open.store(verdict == Verdict::run, std::memory_order_release);
  if (log::enabled(LogLevel::trace) && now >= w.traced_ns + 1'000'000'000) {
    w.traced_ns = now;
    std::string line = "compute GPU " + std::to_string(device) + ": received " +
                       std::to_string(me.received_ns / 1'000'000) + " ms of the last " +
                       std::to_string(watch_->policy.window_ns / 1'000'000) + " ms (" +
                       std::to_string(received / 1'000'000) + " ms in all), " + std::string(to_string(verdict)) +
                       ", queue budget " + std::to_string(budget) + ", " +
                       std::to_string(lane.per_launch_ns.load(std::memory_order_relaxed) / 1000) +
                       " us per launch;";
    for (std::size_t i = 0; i < others.size(); ++i)
      line += " " + w.board_rows[i].name + ": " + std::to_string(others[i].received_ns / 1'000'000) + " ms" +
              (others[i].active ? " active" : "") + (w.board_rows[i].wanting ? " wanting" : "");
    log::write(LogLevel::trace, line);
  }
}

bool poll_drain(ComputeLane& lane, CUcontext only_context, CUcontext* current) {
  std::uint32_t launched = lane.since_drain.load(std::memory_order_acquire);
  if (launched == 0) return true;
  // Targets are only ever live handles: the hooks of the destroys take them out first (under
  // lane.mu). While a capture is in progress nothing is queried (capture.h): the lane stays as busy
  // as it was last seen.
  bool all_done = true;
  const bool queried = query_outside_capture([&] {
    std::lock_guard<std::mutex> lock(lane.mu);
    for (auto it = lane.targets.begin(); it != lane.targets.end();) {
      if (only_context != nullptr && it->context != only_context) {  // not ours to query
        all_done = false;
        return;
      }
      if (only_context == nullptr && *current != it->context &&
          SLICE_REAL_CU(cuCtxSetCurrent)(it->context) == CUDA_SUCCESS)
        *current = it->context;
      const CUresult rc = it->event != nullptr ? SLICE_REAL_CU(cuEventQuery)(it->event)
                                               : SLICE_REAL_CU(cuStreamQuery)(it->stream);
      if (rc == CUDA_ERROR_NOT_READY) {
        all_done = false;
        return;
      }
      if (rc != CUDA_SUCCESS) {  // an error of the work itself: nothing more will finish there
        it = lane.targets.erase(it);
        lane.generation.fetch_add(1, std::memory_order_release);
        continue;
      }
      ++it;
    }
  });
  if (!queried || !all_done) return false;
  // Everything submitted before `launched` was read is done. A launch counted since then keeps
  // the lane busy (the exchange fails).
  if (!lane.since_drain.compare_exchange_strong(launched, 0)) return false;
  const std::uint64_t start = lane.cycle_start_ns.load(std::memory_order_relaxed), now = monotonic_ns();
  if (start != 0 && now > start) lane.per_launch_ns.store((now - start) / launched, std::memory_order_relaxed);
  return true;
}

GateTicket gate_enter(Session& s, CUstream stream, bool per_thread) {
  return gate_enter_in(s, launch_context(s), stream, per_thread);
}

GateTicket gate_enter_in(Session& s, CurrentContext ctx, CUstream stream, bool per_thread) {
  if (ctx.device < 0 || !s.compute) return {};
  ComputeLane& lane = s.compute->lane(ctx.device);
  if (!lane.used.load(std::memory_order_relaxed)) s.compute->use(ctx.device);
  // Where the launch goes, so the watcher can tell when it is done (once per thread and stream).
  thread_local struct {
    ComputeLane* lane = nullptr;
    std::uint64_t context = 0;
    CUstream stream = nullptr;
    bool per_thread = false;
    std::uint32_t generation = ~0u;
    CUevent event = nullptr;
  } last;
  const std::uint32_t generation = lane.generation.load(std::memory_order_acquire);
  if (last.lane != &lane || last.context != ctx.key || last.stream != stream || last.per_thread != per_thread ||
      last.generation != generation) {
    ComputeLane::Target target{reinterpret_cast<CUcontext>(ctx.key), stream, nullptr};
    if (per_thread) {
      // Another thread cannot query this thread's default stream: an event recorded after each
      // launch stands for it.
      // An event belongs to its context and dies with it: one made before any context was
      // destroyed since is never used again (a new context may have the old one's address).
      struct ThreadEvent {
        CUevent event = nullptr;
        std::uint64_t contexts = 0;
      };
      thread_local std::map<std::uint64_t, ThreadEvent> events;
      ThreadEvent& e = events[ctx.key];
      if (e.event == nullptr || e.contexts != contexts_generation()) {
        e.contexts = contexts_generation();
        if (SLICE_REAL_CU(cuEventCreate)(&e.event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) e.event = nullptr;
      }
      target.event = e.event;
      target.stream = nullptr;
    }
    std::lock_guard<std::mutex> lock(lane.mu);
    const bool known = std::any_of(lane.targets.begin(), lane.targets.end(), [&](const ComputeLane::Target& t) {
      return t.context == target.context && t.stream == target.stream && t.event == target.event;
    });
    if (!known) lane.targets.push_back(target);
    last = {&lane, ctx.key, stream, per_thread, generation, target.event};
  }
  // The gate: open, and not too much queued already. Otherwise wait, never past the deadline.
  // Held only by the queue's length, the thread looks itself whether its work is done: the
  // watcher looks less often.
  const auto over_budget = [&] {
    return lane.since_drain.load(std::memory_order_relaxed) >= lane.budget.load(std::memory_order_relaxed);
  };
  if (!lane.open.load(std::memory_order_acquire) || over_budget()) {
    lane.waiting.fetch_add(1);
    const std::uint64_t deadline = monotonic_ns() + kGateDeadlineNs;
    while ((!lane.open.load(std::memory_order_acquire) || over_budget()) && monotonic_ns() < deadline) {
      if (lane.open.load(std::memory_order_acquire) && over_budget() &&
          poll_drain(lane, reinterpret_cast<CUcontext>(ctx.key), nullptr))
        continue;
      sleep_ns(20'000);
    }
    lane.waiting.fetch_sub(1);
  }
  return {&lane, per_thread ? last.event : nullptr};
}

void gate_leave(const GateTicket& ticket, CUresult rc) {
  if (ticket.lane == nullptr || rc != CUDA_SUCCESS) return;
  if (ticket.event != nullptr) SLICE_REAL_CU(cuEventRecord)(ticket.event, CU_STREAM_PER_THREAD);
  // The first launch after a drain starts the clock the launch cost is measured with.
  if (ticket.lane->since_drain.fetch_add(1, std::memory_order_release) == 0)
    ticket.lane->cycle_start_ns.store(monotonic_ns(), std::memory_order_relaxed);
}

void forget_targets(Session& s, CUstream stream, CUcontext context) {
  if (!s.compute) return;
  for (std::size_t d = 0; d < std::max<std::size_t>(s.devices.size(), 1); ++d) {
    ComputeLane& lane = s.compute->lane(static_cast<int>(d));
    std::lock_guard<std::mutex> lock(lane.mu);
    const auto gone = std::erase_if(lane.targets, [&](const ComputeLane::Target& t) {
      return (stream != nullptr && t.stream == stream) || (context != nullptr && t.context == context);
    });
    if (gone != 0) lane.generation.fetch_add(1, std::memory_order_release);
  }
}

void forget_lane_targets(Session& s, int device) {
  if (!s.compute) return;
  ComputeLane& lane = s.compute->lane(device);
  std::lock_guard<std::mutex> lock(lane.mu);
  if (lane.targets.empty()) return;
  lane.targets.clear();
  lane.generation.fetch_add(1, std::memory_order_release);
}

}  // namespace slice::shim
