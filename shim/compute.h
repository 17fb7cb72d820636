// Compute slices in a process: the gate every launch passes, and the watcher thread that measures
// what this process's tenant receives and decides, with the policy of libslice/coordinator/share_policy.h,
// whether the gate is open.
//
// The launch path costs a few loads and one atomic add: no lock, no system call, unless the gate is
// closed (then the launching thread sleeps until the watcher opens it, never past a deadline). The
// watcher starts at the first launch, so a process that only allocates memory pays nothing. It
// sleeps until what it must look at next: the moment this process's queued work should be done,
// a change of the tenant that holds the device (a futex on its DeviceEntry::turn_seq), the next
// decision while others want the device, or, idle, a launch. Per device it:
//  - learns when this process has work on the device: launches since it was last idle, and
//    cuStreamQuery of the streams they went to (or an event, for per-thread default streams, which
//    another thread cannot query);
//  - publishes that (and threads held at the gate) in the tenant's entry, with heartbeats;
//  - credits the tenant with the time it had work, divided among the tenants that had work at the
//    same time (tenants take turns, so this is nearly always 1) and its own processes with work;
//  - reads the other tenants' entries, and decides: the gate opens or closes, and how many launches
//    may be queued before the device has drained (few when others are waiting: a short queue is
//    what lets another tenant, or a higher priority, have the device soon).
#pragma once

#define __CUDA_API_VERSION_INTERNAL 1
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace slice::shim {

struct Session;

// How the launch path wakes the watcher: it bumps `seq` (a futex) when the watcher said it sleeps
// long (`deep_idle`: nothing to do) and work starts, or when a thread comes to a closed gate. The
// system call that wakes it is made only while it sleeps on `seq` (`asleep`); awake, or asleep on
// another tenant's word, it sees the new `seq` before it sleeps on it again.
struct WatcherSignal {
  std::atomic<std::uint32_t> seq{0};
  std::atomic<bool> deep_idle{false};
  std::atomic<bool> asleep{false};
  void wake();
};

// One device of this process.
struct ComputeLane {
  WatcherSignal* watcher = nullptr;                   // the process's watcher, to wake it
  std::atomic<std::uint32_t> gate_seq{0};             // bumped when the gate may have opened (a futex)
  std::atomic<bool> open{true};                       // the policy lets this process submit
  std::atomic<std::uint32_t> budget{~0u};             // launches that may be queued before a drain
  std::atomic<std::uint32_t> since_drain{0};          // launches submitted since it last had no work
  std::atomic<std::uint32_t> waiting{0};              // threads held at the gate now
  std::atomic<bool> used{false};                      // a launch came here: the watcher looks after it
  std::atomic<std::uint64_t> cycle_start_ns{0};       // when since_drain last went from 0 to 1
  std::atomic<std::uint64_t> per_launch_ns{0};        // device time a launch took, as last measured
  std::atomic<std::uint32_t> drain_polls{0};          // looks since the last drain that found work left
  std::atomic<bool> drain_signal{false};              // a host function in a stream will wake the gate (compute.cpp)
  std::atomic<std::uint64_t> signal_requested_ns{0};  // ... asked for then
  // What the signals asked for say (under mu): requested and fired count them (host functions run
  // in order in a stream, so equal counts mean the last one came); the last asked for spoke for
  // signal_launched launches, counted in the drain cycle signal_epoch (drain_epoch counts drains).
  std::uint32_t signals_requested = 0;
  std::atomic<std::uint32_t> signals_fired{0};
  std::uint32_t signal_launched = 0;
  std::uint32_t signal_epoch = 0;
  std::atomic<std::uint32_t> drain_epoch{0};
  struct Target {
    CUcontext context = nullptr;
    CUstream stream = nullptr;  // queried with cuStreamQuery...
    CUevent event = nullptr;    // ...or this event, recorded after each launch (per-thread streams)
  };
  std::mutex mu;                             // guards targets
  std::vector<Target> targets;               // where this process's launches went
  std::atomic<std::uint32_t> generation{0};  // bumped when targets shrink (threads re-register)
};

// Queries where this process's launches went; when all are done, the lane is drained (since_drain
// back to 0, the launch cost measured) and true is returned. `only_context`: only targets of this context
// can be queried (a thread must not change the application's current context); nullptr: any, the
// watcher making each current in turn (`current` remembers what it made current). `held_here`: the
// calling thread is held at the lane's gate (counted in `waiting`).
bool poll_drain(ComputeLane& lane, CUcontext only_context, CUcontext* current, bool held_here);
// Marks the lane drained of the `launched` launches counted when its work was found done (false if
// more were counted since), measures a launch's cost (`seen_at_once`: the drain was seen when it
// happened, as the driver's signal sees it), and lets the gate's sleepers go (the others, when the
// caller is one of them: `held_here`).
bool drained(ComputeLane& lane, std::uint32_t launched, bool seen_at_once, bool held_here);

class Compute {
 public:
  explicit Compute(Session& s);
  ~Compute();
  ComputeLane& lane(int device) { return lanes_[device]; }
  // Starts the watcher (once) and marks the device as used.
  void use(int device);
  // Stops the watcher (process exit): it must not call the driver while the process tears it down.
  void stop();

 private:
  struct Watch;  // the watcher's own state (compute.cpp)
  struct Next;   // when the watcher looks again, and at whom it waits meanwhile
  void run();
  Next tick(int device, std::uint64_t now_ns);
  bool lanes_busy() const;  // work queued or a thread at the gate, on any device
  Session& session_;
  WatcherSignal signal_;
  std::unique_ptr<ComputeLane[]> lanes_;
  std::unique_ptr<Watch> watch_;
  std::once_flag started_;
  std::thread watcher_;
  std::atomic<bool> stop_{false};
};

// The launch gate, in two halves around the driver's call. gate_enter returns a ticket (its lane
// nullptr: not gated, as when libslice is off), after waiting while the gate is closed; gate_leave
// counts a launch that succeeded and records the per-thread stream's event. `per_thread`: the launch went to the
// calling thread's per-thread default stream (a _ptsz entry point with stream 0, or CU_STREAM_PER_THREAD).
struct GateTicket {
  ComputeLane* lane = nullptr;
  CUevent event = nullptr;  // recorded after a launch to this thread's per-thread default stream
};
GateTicket gate_enter(Session& s, CUstream stream, bool per_thread);
// The same for a launch into a context that need not be the calling thread's current one (a
// multi-device launch names one stream per device).
struct CurrentContext;
GateTicket gate_enter_in(Session& s, CurrentContext context, CUstream stream, bool per_thread);
void gate_leave(const GateTicket& ticket, CUresult rc);

// The application is about to destroy `stream` (or every stream of `context`, with the context):
// the watcher forgets them first, so it never queries a destroyed handle (it waits for a query of
// them already under way). Threads that launch there again register again.
void forget_targets(Session& s, CUstream stream, CUcontext context);
void forget_lane_targets(Session& s, int device);  // every one on a device (a primary context's release)

}  // namespace slice::shim
