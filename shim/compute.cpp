#include "compute.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <map>
#include <string>

#include "capture.h"
#include "awake_bell.h"
#include "compute_board.h"
#include "keep_errno.h"
#include "crash_handler.h"
#include "fork_guard.h"
#include "hook_frame.h"
#include "futex.h"
#include "coordinator_layout.h"
#include "log.h"
#include "reconcile.h"
#include "session.h"
#include "share_policy.h"
#include "tenant_file.h"  // monotonic_ns
#include "shim.h"

namespace slice::shim {
namespace {

// When the watcher looks again. It sleeps in between (a futex, woken early by what it waits for),
// so these are upper bounds, not polling rates.
constexpr std::uint64_t kBusyMaxNs = 10'000'000;    // has work, nobody else wants the device
constexpr std::uint64_t kDecideNs = 5'000'000;      // holds its turn while others want the device
                                                    // (turns last tens of ms: SharePolicy)
constexpr std::uint64_t kDrainPollNs = 20'000;      // drains for someone else, past when it should
                                                    // be done: the device idles until this is seen
constexpr std::uint64_t kDrainPollMaxNs = 50'000;   // ... at least this often, however late
constexpr std::uint64_t kDrainMaxNs = 2'000'000;    // sleeps at most this long before that
constexpr std::uint64_t kTurnWaitNs = 15'000'000;   // held while another tenant wants the device (its
                                                    // change of turns wakes us; heartbeats last 50 ms)
constexpr std::uint64_t kCrossedNs = 200'000;       // held, and nobody wants the device
constexpr std::uint64_t kHandoverLeadNs = 100'000;  // looks closely from this long before the
                                                    // holder's queue should be done
constexpr std::uint64_t kRecentNs = 100'000'000;    // idle this long after work: looks every...
constexpr std::uint64_t kRecentTickNs = 2'000'000;  // ... 2 ms, so short requests are seen
constexpr std::uint64_t kDeepIdleNs = 100'000'000;  // idle longer: woken by the next launch
// A thread at a closed gate sleeps until the watcher opens it, looking again at least every
// kClosedLookNs all the same (a wake-up lost to a bug must not hold a launch for long; 10 ms made
// a held tenant's thread wake 100 times a second for nothing). One at an open gate, held by its
// queue's length, sleeps until the driver says its stream drained (request_drain_signal), or,
// without that signal, until its work should be done, then looks itself
// whether it is, every kDrainPollNs; before that, at least every kGateLookNs too, in case the
// measure of a launch's cost is too high (the device would idle from the drain until the thread
// looks). Longer looks, or looks spaced further apart once late, cost the device 3-5% of its time
// on the simulated GPU with three or more tenants, for a few tenths of a point of a core.
constexpr std::uint64_t kGateLookNs = 2'000'000;
constexpr std::uint64_t kClosedLookNs = 40'000'000;
// How long a launch may be held at a closed gate before it goes anyway: no wait without an end.
constexpr std::uint64_t kGateDeadlineNs = 2'000'000'000;
// Work this process may queue ahead when others want the device, in device time.
constexpr std::uint64_t kQueueAheadNs = 8'000'000;

// The gate may have opened: its sleepers look again. `held_here`: the caller is one of them (counted
// in lane.waiting, awake): it wakes the others only, and makes no system call when there are none.
void wake_gate(ComputeLane& lane, bool held_here) {
  // Sequentially consistent, as the waiter's count and load of the word are: either it sees the
  // new word (and does not sleep) or this sees it counted (and wakes it).
  lane.gate_seq.fetch_add(1);
  if (lane.waiting.load() > (held_here ? 1u : 0u)) futex_wake_all(&lane.gate_seq, false);
}

// A drain signal is believed this long: a host function is not called after a context error, and
// one that never came must not keep the thread from looking for itself.
constexpr std::uint64_t kSignalStaleNs = 1'000'000'000;

// The driver calls this, on a thread of its own, once the work queued before it in the stream is
// done: a thread held at the gate by its queue's length then looks at once, instead of polling
// for the drain (drained_by_signal). It makes no CUDA call (the driver forbids them in a host
// function). The lane lives as long as the process (sessions are never freed), so a call that
// comes late finds it.
void CUDA_CB drain_signalled(void* data) {
  auto* lane = static_cast<ComputeLane*>(data);
  lane->signals_fired.fetch_add(1);
  lane->drain_signal.store(false);
  wake_gate(*lane, false);
}

// A signal asked for and not yet come, recently enough to wait for it.
bool signal_pending(const ComputeLane& lane, std::uint64_t now) {
  return lane.drain_signal.load(std::memory_order_relaxed) &&
         now < lane.signal_requested_ns.load(std::memory_order_relaxed) + kSignalStaleNs;
}

// Asks the driver to call drain_signalled when `stream`'s queued work is done (one request per lane
// at a time); false when it cannot (the thread then polls). Called by the application's own thread
// about to launch into `stream`, in its current context, with the stream not being captured: a
// host function there is as legal as the launch that follows it.
// While any capture is in progress in the process it asks nothing, as libslice queries nothing then
// (capture.h): a host function in the legacy stream would conflict with a capture elsewhere.
// Never into the legacy stream: an operation there waits for every blocking stream of the context
// and holds their later work back.
bool request_drain_signal(ComputeLane& lane, CUstream stream, bool per_thread, std::uint64_t now) {
  if (captures_active()) return false;
  if (!per_thread && (stream == nullptr || stream == CU_STREAM_LEGACY)) return false;
  if (lane.drain_signal.load(std::memory_order_relaxed)) {
    if (signal_pending(lane, now)) return true;  // one on its way
    // It never came: asked anew (the old one, should it come after all, only wakes the gate).
  } else if (lane.drain_signal.exchange(true)) {
    return true;  // another thread asked just now
  }
  lane.signal_requested_ns.store(now, std::memory_order_relaxed);
  const auto launch_host_func = SLICE_REAL(cuLaunchHostFunc);
  std::lock_guard<std::mutex> lock(lane.mu);
  // What it will speak for: the launches counted now, in this drain cycle, all into this stream
  // (the lane's only target; with more, the signal only wakes the thread to look).
  lane.signal_launched = lane.since_drain.load(std::memory_order_acquire);
  lane.signal_epoch = lane.drain_epoch.load(std::memory_order_acquire);
  if (lane.targets.size() != 1) lane.signal_launched = 0;
  ++lane.signals_requested;
  if (launch_host_func != nullptr &&
      launch_host_func(per_thread ? CU_STREAM_PER_THREAD : stream, drain_signalled, &lane) == CUDA_SUCCESS)
    return true;
  --lane.signals_requested;
  lane.drain_signal.store(false);
  return false;
}

// After a drain signal: the lane is drained if the last signal asked for came, no drain happened
// since it was asked for (a drain and a refill to the same count would otherwise pass for it), the
// stream it was queued in is still all the lane has, and nothing was launched since. No query: the
// stream is not done until the host function returns, so a query now would find it busy. Called
// by a thread held at the gate.
bool drained_by_signal(ComputeLane& lane) {
  std::uint32_t launched = 0;
  {
    std::lock_guard<std::mutex> lock(lane.mu);
    if (lane.signals_requested == 0 || lane.signals_fired.load() != lane.signals_requested ||
        lane.signal_epoch != lane.drain_epoch.load() || lane.targets.size() != 1)
      return false;
    launched = lane.signal_launched;
    lane.signal_launched = 0;  // spoken for once
  }
  return launched != 0 && drained(lane, launched, true, true);
}

// When this lane's queued work should be done: launches since the drain, at the measured cost of
// one, from when the first of them was queued. 0 when there is no measure yet.
std::uint64_t expected_drain_ns(const ComputeLane& lane, std::uint32_t launched) {
  const std::uint64_t per = lane.per_launch_ns.load(std::memory_order_relaxed);
  const std::uint64_t start = lane.cycle_start_ns.load(std::memory_order_relaxed);
  if (per == 0 || start == 0) return 0;
  return start + per * launched;
}

}  // namespace

void WatcherSignal::wake() {
  // Sequentially consistent, as the watcher's store of `asleep` is (Compute::run): either it sees
  // the new word in its futex wait (and does not sleep) or this sees it asleep (and wakes it).
  seq.fetch_add(1);
  if (asleep.load()) futex_wake_all(&seq, false);
}

struct Compute::Next {
  std::uint64_t at = ~0ull;                // look again then at the latest
  const TenantCompute* wait_on = nullptr;  // meanwhile sleep on this tenant's turn_seq
  ComputeBoard* board = nullptr;           // ... a row of this board's last read
  bool deep_idle = true;                   // nothing to do: a launch wakes the watcher
  void merge(const Next& n) {
    if (n.at < at) {
      at = n.at;
      wait_on = n.wait_on;
      board = n.board;
    }
    deep_idle = deep_idle && n.deep_idle;
  }
};

struct Compute::Watch {
  struct Lane {
    std::uint64_t liveness_checked_ns = 0;
    bool was_active = false;  // over the step that ends now
    // The last decision: when the next is due, and what it saw (a look in between that finds the
    // queue not yet done only looks again, below).
    std::uint64_t decide_at = 0;
    bool decided_wanting = false;
    bool decided_open = false;
    std::uint64_t last_active_ns = 0;  // when it last had work
    DeviceTimeEstimator estimate;      // what this process received there
    // The other tenants on this GPU: a board of its own per GPU, since what a tenant does (rests,
    // is absent) is a matter of the GPU; one board for all read a tenant busy on one GPU as
    // resting on another, and skipped it on both.
    std::unique_ptr<ComputeBoard> board;
    std::vector<TenantCompute> board_rows;
    CUcontext current = nullptr;  // what the watcher thread has made current
    std::uint64_t traced_ns = 0;
  };
  std::vector<Lane> lanes;
  SharePolicy policy;
  Watch(const std::string& dir, const std::string& tenant, const std::string& policy_dir, std::size_t n) : lanes(n) {
    for (Lane& l : lanes) l.board = std::make_unique<ComputeBoard>(dir, tenant, policy_dir);
  }
};

Compute::Compute(Session& s)
    : session_(s),
      lanes_(new ComputeLane[std::max<std::size_t>(s.devices.size(), 1)]),
      watch_(std::make_unique<Watch>(s.config.coordinator_dir, s.config.tenant, s.config.policy_dir,
                                     std::max<std::size_t>(s.devices.size(), 1))) {
  for (std::size_t d = 0; d < std::max<std::size_t>(s.devices.size(), 1); ++d) lanes_[d].watcher = &signal_;
}

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
  signal_.wake();                                             // out of its sleep, on its own word ...
  for (Watch::Lane& l : watch_->lanes) l.board->interrupt();  // ... or on another tenant's
  if (watcher_.joinable()) watcher_.join();
}

void Compute::run() {
  // Every driver and NVML call this thread makes is libslice's own: a hook they reach through the
  // dynamic linker passes straight through (hook_frame.h).
  mark_libslice_thread();
  // Named, so that whoever lists the process's threads (top -H, a debugger) sees whose it is.
  pthread_setname_np(pthread_self(), "slice-watcher");
  load_crash_unwinder();  // off the start-up path: see crash_handler.h
  // Its sleeps end when the device changes hands: the kernel's default timer slack (50 us) would
  // add that much idle device time to every hand-over. This thread is ours to set.
  prctl(PR_SET_TIMERSLACK, 1ul, 0ul, 0ul, 0ul);
  // This thread's calls must never count against another thread's capture: in the relaxed mode only
  // what necessarily conflicts with a capture is prohibited to it (and that it never does: capture.h).
  CUstreamCaptureMode relaxed = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (const auto exchange = SLICE_REAL(cuThreadExchangeStreamCaptureMode)) exchange(&relaxed);
  while (!stop_.load(std::memory_order_relaxed)) {
    // Read before looking: a launch or a waiter that comes after the look changes it, and the sleep
    // below then ends at once.
    const std::uint32_t seq = signal_.seq.load(std::memory_order_acquire);
    std::uint64_t now = 0;
    Next next;
    {
      // A round of driver and NVML calls of libslice's own: a fork waits for its end (fork_guard.h),
      // and none begins while one is being prepared. The sleep below is outside it.
      const OwnWork own;
      now = monotonic_ns();
      capture_forget_ended();
      for (std::size_t d = 0; d < session_.devices.size(); ++d)
        reconcile(session_, static_cast<int>(d), kReconcileTickNs);
      next.at = now + kDeepIdleNs;
      for (std::size_t d = 0; d < session_.devices.size(); ++d) {
        if (!lanes_[d].used.load(std::memory_order_acquire)) continue;
        next.merge(tick(static_cast<int>(d), now));
      }
    }
    if (stop_.load(std::memory_order_relaxed)) break;
    const std::uint64_t timeout = next.at > now ? next.at - now : 0;
    if (timeout == 0) continue;
    if (next.wait_on != nullptr) {
      // Another tenant's word, never for long (what it publishes is not to be trusted, and this
      // process's heartbeats must stay fresh): woken by its change of turns, or it looks again.
      if (next.board->wait_for(*next.wait_on, std::min(timeout, kTurnWaitNs)) != WaitResult::failed) continue;
    }
    if (next.deep_idle) {
      // Said before the sleep, then the lanes looked at again (both sequentially consistent, as
      // gate_leave's count and load are): a first launch either sees it and wakes this thread, or
      // is seen here.
      signal_.deep_idle.store(true);
      if (lanes_busy()) {
        signal_.deep_idle.store(false);
        continue;
      }
    }
    signal_.asleep.store(true);
    futex_wait(&signal_.seq, seq, timeout, false);
    signal_.asleep.store(false, std::memory_order_relaxed);
    signal_.deep_idle.store(false, std::memory_order_relaxed);
  }
}

bool Compute::lanes_busy() const {
  for (std::size_t d = 0; d < std::max<std::size_t>(session_.devices.size(), 1); ++d)
    if (lanes_[d].since_drain.load() != 0 || lanes_[d].waiting.load() != 0) return true;
  return false;
}

Compute::Next Compute::tick(int device, std::uint64_t now) {
  ComputeLane& lane = lanes_[device];
  Watch::Lane& w = watch_->lanes[device];
  Coordinator& c = *session_.coordinator;
  DeviceEntry& entry = c.device_entry(device);

  // 1. Has this process still work on the device?
  if (lane.since_drain.load(std::memory_order_acquire) != 0) poll_drain(lane, nullptr, &w.current, false);
  const std::uint32_t launched = lane.since_drain.load(std::memory_order_acquire);
  const bool active = launched != 0;
  const bool wanting = lane.waiting.load(std::memory_order_acquire) != 0;
  // Work after a rest: the others may have stopped reading this tenant's file (a tenant rests for
  // them after a window without device time; half of one here, for margin), and read it at their
  // next look once the bell rings (awake_bell.h), after what it publishes below.
  const bool woke = (active || wanting) && now >= w.last_active_ns + watch_->policy.window_ns / 2;
  if (active || wanting) w.last_active_ns = now;
  // Nothing of ours on the device, nobody waiting at the gate: nothing to watch until work comes.
  // Between requests the next one is seen when it starts; idle longer, the launch that brings work
  // wakes a deep sleep.
  const auto idle_next = [&] {
    Next next;
    next.deep_idle = now >= w.last_active_ns + kRecentNs;
    next.at = now + (next.deep_idle ? kDeepIdleNs : kRecentTickNs);
    return next;
  };

  // When the queue should be done; until then (no later than `latest`) the watcher sleeps, from then
  // on it looks every `poll`, twice as long each time it was not done (up to kDrainPollMaxNs: work
  // that shares the device with another tenant's takes longer than its measure). Without a measure
  // yet (no drain seen), every `poll`.
  const std::uint64_t drain_at = active ? expected_drain_ns(lane, launched) : 0;
  const auto until_drain = [&](std::uint64_t poll, std::uint64_t latest) {
    const std::uint32_t missed = std::min<std::uint32_t>(lane.drain_polls.load(std::memory_order_relaxed), 16);
    const std::uint64_t every = std::min<std::uint64_t>(poll << missed, std::max(poll, kDrainPollMaxNs));
    return drain_at <= now + every ? now + every : std::min(drain_at, now + latest);
  };
  // A look between decisions that finds the queue not yet done, and nothing else changed that the
  // others see (still active, the same threads held or not): only the next look is set. No board is
  // read and nothing published: a tenant draining its queue looks every few tens of microseconds
  // near the end, and each look must cost little.
  // (Only while it yields: a tenant that has the device decides at each look, so that its turn
  // ends on time.)
  if (active && w.was_active && !w.decided_open && now < w.decide_at && wanting == w.decided_wanting) {
    Next next;
    next.deep_idle = false;
    next.at = std::min(until_drain(kDrainPollNs, kDrainMaxNs), w.decide_at);
    return next;
  }

  // The process is checked on now and then (its flags published either way).
  const bool check_liveness = now >= w.liveness_checked_ns + 100000000;
  if (check_liveness) w.liveness_checked_ns = now;
  if (!active && !wanting && !w.was_active) {
    // Idle now and over the step that ends: nothing received, nothing to decide. The flags are
    // published (the others see it gone at once).
    c.publish_compute(device, 0, check_liveness);
    w.estimate.step(now, false, 1);
    return idle_next();
  }

  // 2. Publish it for the others, and credit the step that ends now.
  c.publish_compute(device, (active ? kSlotActive : 0) | (wanting ? kSlotWanting : 0), check_liveness,
                    !lane.open.load(std::memory_order_relaxed));
  if (active) entry.active_heartbeat_ns.store(now, std::memory_order_relaxed);
  if (wanting) entry.wanting_heartbeat_ns.store(now, std::memory_order_relaxed);
  const Coordinator::ComputeSettings settings = c.publish_compute_settings(device);
  if (woke) ring_awake_bell(c.dir());

  w.board->read(session_.devices[device].uuid.data(), now, watch_->policy.window_ns, w.board_rows);
  // The step that ends now, shared among the tenants with work then and this tenant's processes.
  unsigned tenants = 1;
  for (const TenantCompute& t : w.board_rows) tenants += t.active;
  const unsigned processes = std::max(1u, entry.active_processes.load(std::memory_order_relaxed));
  const std::uint64_t credited = w.estimate.received_ns();
  w.estimate.step(now, w.was_active, tenants * processes, lane.cycle_start_ns.load(std::memory_order_relaxed));
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
    contended |= wants && priority_rank(t.priority) >= priority_rank(settings.priority);
    // A higher priority that used the device within the window will likely want it again soon: its
    // next request must not wait behind a deep queue of ours, so ours stays one launch deep.
    // So does one that joined within the window: its first request should not wait either.
    higher_present |= (wants || t.window_received_ns != 0 || joined_within(t, now, watch_->policy.window_ns)) &&
                      priority_rank(t.priority) > priority_rank(settings.priority);
  }
  contended |= higher_present;
  const bool tenant_active = entry.active_processes.load(std::memory_order_relaxed) != 0;
  const TenantLoad me{
      settings.share,
      settings.limit,
      settings.priority,
      std::min(received_over(history, received, now, watch_->policy.window_ns), watch_->policy.window_ns),
      true,
      tenant_active};
  const Verdict verdict = watch_->policy.decide(me, others);
  std::uint32_t budget = ~0u;
  if (contended) {
    const std::uint64_t per = std::max<std::uint64_t>(lane.per_launch_ns.load(std::memory_order_relaxed), 1);
    budget = higher_present ? 1 : static_cast<std::uint32_t>(std::clamp<std::uint64_t>(kQueueAheadNs / per, 1, 64));
  }
  const bool open = verdict == Verdict::run;
  // Threads at the gate are woken only when they may go: it opened, or, open, it lets more in.
  const bool opened =
      open && (!lane.open.load(std::memory_order_relaxed) || budget > lane.budget.load(std::memory_order_relaxed));
  // Closing: a change of turns. Those who wait for it are woken now, told when what this process
  // still has queued should be done (they look closely from shortly before). Opening: nothing to
  // wait for any more.
  const bool closing = !open && lane.open.load(std::memory_order_relaxed);
  lane.budget.store(budget, std::memory_order_relaxed);
  lane.open.store(open, std::memory_order_release);
  if (closing) {
    const std::uint64_t eta = expected_drain_ns(lane, launched);
    c.yield_compute(device, !active ? 0 : eta > now ? eta : now + kDrainPollNs);
  } else if (opened && open) {
    entry.drain_eta_ns.store(0, std::memory_order_relaxed);
  }
  if (opened) wake_gate(lane, false);
  if (log::enabled(LogLevel::trace) && now >= w.traced_ns + 1'000'000'000) {
    w.traced_ns = now;
    std::string line = "compute GPU " + std::to_string(device) + ": received " +
                       std::to_string(me.received_ns / 1'000'000) + " ms of the last " +
                       std::to_string(watch_->policy.window_ns / 1'000'000) + " ms (" +
                       std::to_string(received / 1'000'000) + " ms in all), " + std::string(to_string(verdict)) +
                       ", queue budget " + std::to_string(budget) + ", " +
                       std::to_string(lane.per_launch_ns.load(std::memory_order_relaxed) / 1000) + " us per launch;";
    for (std::size_t i = 0; i < others.size(); ++i)
      line += " " + w.board_rows[i].name + ": " + std::to_string(others[i].received_ns / 1'000'000) + " ms" +
              (others[i].active ? " active" : "") + (w.board_rows[i].wanting ? " wanting" : "");
    log::write(LogLevel::trace, line);
  }

  // 4. When to look again.
  w.decide_at = now + kDecideNs;
  w.decided_wanting = wanting;
  w.decided_open = open;
  if (!active && !wanting) return idle_next();  // whatever the verdict
  Next next;
  next.deep_idle = false;
  if (!open && active) {
    // Drains for someone else: the device idles from the drain until this is seen.
    next.at = until_drain(kDrainPollNs, kDrainMaxNs);
  } else if (!open) {
    // Held back, nothing of ours on the device: until the tenant that has the device publishes a
    // change (its work ends: a futex), or the next decision. A limit moves with the window only.
    // With nobody on the device (the others' figures and ours crossed), soon: it idles meanwhile.
    const TenantCompute* holder = nullptr;
    const TenantCompute* wanter = nullptr;
    for (const TenantCompute& t : w.board_rows) {
      if (t.active && holder == nullptr) holder = &t;
      if (t.wanting && wanter == nullptr) wanter = &t;
    }
    const bool handover_soon = holder != nullptr && holder->drain_eta_ns != 0 &&
                               now + kHandoverLeadNs >= holder->drain_eta_ns &&
                               now < holder->drain_eta_ns + kDrainMaxNs;
    if (verdict == Verdict::hold_for_limit) {
      next.at = now + kDecideNs;
    } else if (handover_soon) {
      // The holder's queue should be done about now, and it wakes this thread when it is.
      next.at = now + kDrainPollMaxNs * 4;
      next.wait_on = holder;
      next.board = w.board.get();
    } else if (holder != nullptr && holder->drain_eta_ns != 0 && holder->drain_eta_ns > now) {
      // It yields: until shortly before its queue should be done (or it changes), but no longer
      // than a turn's wait (the figure is another process's: run() bounds the sleep).
      next.at = std::min(holder->drain_eta_ns - kHandoverLeadNs, now + kTurnWaitNs);
      next.wait_on = holder;
      next.board = w.board.get();
    } else if (holder != nullptr || wanter != nullptr) {
      // Another tenant has the device, or takes it back after its short queue drained (it still
      // wants it): at the next decision, or when it no longer wants the device (its word changes
      // only then: coordinator_layout.h), whichever is first.
      next.at = now + kTurnWaitNs;
      next.wait_on = holder != nullptr ? holder : wanter;
      next.board = w.board.get();
    } else {
      next.at = now + kCrossedNs;
    }
  } else if (active && wanting) {
    // Has the device, and threads wait for its short queue to drain: they look for the drain
    // themselves (gate_enter); this only decides, and looks in case they cannot (another context).
    next.at = now + kDecideNs;
  } else if (active) {
    // Has the device: when its work should be done (to see the drain soon), and, while others want
    // the device, at the next decision.
    const std::uint64_t latest = contended ? kDecideNs : kBusyMaxNs;
    next.at = drain_at == 0 ? now + latest : until_drain(latest / 4, latest);
  } else {
    next.at = now + kDecideNs;  // open, and threads still at the gate: they go at once
  }
  return next;
}

bool poll_drain(ComputeLane& lane, CUcontext only_context, CUcontext* current, bool held_here) {
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
          SLICE_REAL(cuCtxSetCurrent)(it->context) == CUDA_SUCCESS)
        *current = it->context;
      const CUresult rc =
          it->event != nullptr ? SLICE_REAL(cuEventQuery)(it->event) : SLICE_REAL(cuStreamQuery)(it->stream);
      if (rc == CUDA_ERROR_NOT_READY) {
        all_done = false;
        // A look at or after when the work should have been done that finds it not done: the
        // measure is too low (the drain found next is then measured). Looks before that time (the
        // watcher's, deciding) say nothing of the measure: counted, an estimate too high would never
        // fall, and the device would idle longer at each drain.
        const std::uint64_t due = expected_drain_ns(lane, launched);
        if (due == 0 || monotonic_ns() >= due) lane.drain_polls.fetch_add(1, std::memory_order_relaxed);
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
  return drained(lane, launched, false, held_here);
}

bool drained(ComputeLane& lane, std::uint32_t launched, bool seen_at_once, bool held_here) {
  // Everything submitted before `launched` was read is done. A launch counted since then keeps
  // the lane busy (the exchange fails).
  if (!lane.since_drain.compare_exchange_strong(launched, 0)) return false;
  lane.drain_epoch.fetch_add(1);
  const std::uint64_t start = lane.cycle_start_ns.load(std::memory_order_relaxed), now = monotonic_ns();
  // A drain the driver signalled was seen when it happened: its measure is right, as one found
  // after looks that came too early.
  const std::uint32_t polls = lane.drain_polls.exchange(0, std::memory_order_relaxed) + (seen_at_once ? 1 : 0);
  if (start != 0 && now > start) {
    // The watcher looks when this figure says the work should be done. Found done at the first look,
    // it may have been done long before (the device idling meanwhile): the figure is too high, and
    // taken as measured it would never fall. So it falls by a quarter (a figure raised while the
    // device was shared with another tenant's queue comes back down within a few drains; one that
    // falls too low costs a few looks). Found done only after looks that came too early, the drain
    // was seen within one look's interval: measured, it is right.
    const std::uint64_t measured = (now - start) / launched,
                        before = lane.per_launch_ns.load(std::memory_order_relaxed);
    lane.per_launch_ns.store(before == 0 || polls != 0 ? measured : std::min(measured, before - before / 4),
                             std::memory_order_relaxed);
  }
  wake_gate(lane, held_here);  // threads held by the queue's length may go
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
        if (SLICE_REAL(cuEventCreate)(&e.event, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) e.event = nullptr;
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
    const KeepErrno keep;  // futex waits and timer slack: the program's errno is the driver's
    // The first thread to wait wakes the watcher: at a closed gate, it publishes that this tenant
    // wants the device; at an open one (its queue refills), it decides again, so that a turn ends
    // at a refill rather than a queue later. (Deciding only when a decision is due, every 5 ms,
    // cost the largest share 3-5 points on the simulated GPU.)
    if (lane.waiting.fetch_add(1) == 0) lane.watcher->wake();
    // Where the thread polls for its drain, it sleeps in steps of tens of us, each of which the
    // default timer slack (50 us) would lengthen, the device idling meanwhile: tight while it polls,
    // its own after. Made tight at the first such step only: a thread woken by the watcher (a closed
    // gate) or by the driver's signal never times out on time, and makes no system call for it.
    int slack = 0;  // the thread's own, once made tight (> 1: to be given back)
    bool slack_tight = false;
    const std::uint64_t start = monotonic_ns();
    const std::uint64_t deadline = start + kGateDeadlineNs;
    // The driver is asked once per wait to say when this stream's work is done (a host function);
    // where it said so and other streams of the lane are still busy, the thread polls as before.
    bool signal_asked = false;
    bool own_context = false, own_context_known = false;
    for (std::uint64_t now = start; now < deadline; now = monotonic_ns()) {
      const std::uint32_t seq = lane.gate_seq.load();  // sequentially consistent: wake_gate
      const bool open = lane.open.load(std::memory_order_acquire);
      if (open && !over_budget()) break;
      // Closed: until the watcher opens it. Open but queued deep enough: until the driver says the
      // stream's work is done, or, where it cannot, until that work should be done, then it looks
      // itself (the device idles from the drain until it is seen, and this thread, seeing it,
      // launches at once). As kGateLookNs and kClosedLookNs say.
      std::uint64_t timeout = std::min(deadline - now, kClosedLookNs);
      if (open) {
        if (!own_context_known) {  // a host function goes only where the thread's own launch goes
          own_context = current_context(s).key == ctx.key;
          own_context_known = true;
        }
        // Not with a queue one launch deep (a higher priority is around): the signal lets this
        // thread launch again the moment its work is done, before the device can switch to the
        // higher priority's waiting launch, which the gap of a look lets in. (Asked there too, it
        // raised a high-priority server's p99 from about 2.1 to 3.0 ms beside 1 ms kernels.)
        const bool one_deep = lane.budget.load(std::memory_order_relaxed) <= 1;
        const bool signalled = signal_pending(lane, now) || (!signal_asked && own_context && !one_deep &&
                                                             request_drain_signal(lane, stream, per_thread, now));
        signal_asked = true;
        const std::uint64_t drain_at = expected_drain_ns(lane, lane.since_drain.load(std::memory_order_relaxed));
        if (!signalled) {
          timeout =
              std::min(timeout, drain_at > now + kDrainPollNs ? std::min(drain_at - now, kGateLookNs) : kDrainPollNs);
          if (!slack_tight) {
            slack_tight = true;
            slack = prctl(PR_GET_TIMERSLACK, 0ul, 0ul, 0ul, 0ul);
            if (slack > 1) prctl(PR_SET_TIMERSLACK, 1ul, 0ul, 0ul, 0ul);
          }
        }
      }
      const bool timed_out = futex_wait(&lane.gate_seq, seq, timeout, false) == WaitResult::timed_out;
      if (!timed_out && signal_pending(lane, monotonic_ns())) continue;  // woken, but not by the signal
      // Its time to look, or the driver said the stream drained: it asks whether all is done (if
      // the host function is still returning, the stream is not done yet, and it looks again
      // kDrainPollNs later).
      if (lane.open.load(std::memory_order_acquire) && over_budget() && !drained_by_signal(lane))
        poll_drain(lane, reinterpret_cast<CUcontext>(ctx.key), nullptr, true);
    }
    if (slack > 1) prctl(PR_SET_TIMERSLACK, static_cast<unsigned long>(slack), 0ul, 0ul, 0ul);
    lane.waiting.fetch_sub(1);
  }
  return {&lane, per_thread ? last.event : nullptr};
}

void gate_leave(const GateTicket& ticket, CUresult rc) {
  if (ticket.lane == nullptr || rc != CUDA_SUCCESS) return;
  if (ticket.event != nullptr) SLICE_REAL(cuEventRecord)(ticket.event, CU_STREAM_PER_THREAD);
  // The first launch after a drain starts the clock the launch cost is measured with, and wakes the
  // watcher if it sleeps long (idle): it must see this work and publish it.
  // Sequentially consistent, as the watcher's word and look are (Compute::run).
  if (ticket.lane->since_drain.fetch_add(1) == 0) {
    ticket.lane->cycle_start_ns.store(monotonic_ns(), std::memory_order_relaxed);
    WatcherSignal& w = *ticket.lane->watcher;
    if (w.deep_idle.load() && w.deep_idle.exchange(false)) w.wake();
  }
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
