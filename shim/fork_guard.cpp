#include "fork_guard.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>

#include "futex.h"
#include "keep_errno.h"
#include "tenant_file.h"  // monotonic_ns

namespace slice::shim {

namespace {

constinit std::atomic<std::uint32_t> g_forking{0};    // 1 while a fork is being prepared (a futex)
constinit std::atomic<std::uint32_t> g_in_flight{0};  // OwnWork under way, all threads (a futex)
constinit std::atomic<bool> g_installed{false};
constinit thread_local unsigned t_own_depth = 0;  // this thread's OwnWork, nested

// A fork waiting on libslice's own work sleeps in steps of this (and is woken when the last ends).
constexpr std::uint64_t kWaitStepNs = 10'000'000;

void prepare() {
  const KeepErrno keep;  // the program's errno across its fork is its own
  g_forking.store(1);
  // The forking thread's own work (should NVML or the driver fork from inside a call of ours) is
  // not waited for: it cannot end before the fork does.
  const std::uint32_t mine = t_own_depth != 0 ? 1 : 0;
  const std::uint64_t deadline = monotonic_ns() + kForkWaitNs;
  for (std::uint32_t n = g_in_flight.load(); n > mine; n = g_in_flight.load()) {
    const std::uint64_t now = monotonic_ns();
    if (now >= deadline) break;
    futex_wait(&g_in_flight, n, std::min(deadline - now, kWaitStepNs), false);
  }
}

void parent() {
  g_forking.store(0);
  futex_wake_all(&g_forking, false);
}

void child() {
  g_in_flight.store(t_own_depth != 0 ? 1 : 0);
  g_forking.store(0);
  real_driver_after_fork_in_child();
  session_after_fork_in_child();
  capture_after_fork_in_child();
  nvml_after_fork_in_child();
  graph_memory_after_fork_in_child();
  procaddr_after_fork_in_child();
}

}  // namespace

OwnWork::OwnWork() noexcept {
  if (t_own_depth++ != 0) {  // nested: counted by the outermost
    return;
  }
  // Held back at most as long as a fork waits for work in flight: this thread may hold a lock of
  // the program's that a fork handler registered before libslice's (and so run after it) takes.
  std::uint64_t deadline = 0;
  for (;;) {
    if (g_forking.load() != 0) {
      const KeepErrno keep;
      const std::uint64_t now = monotonic_ns();
      if (deadline == 0) deadline = now + kForkWaitNs;
      if (now < deadline) {
        futex_wait(&g_forking, 1, std::min(deadline - now, kWaitStepNs), false);
        continue;
      }
    }
    g_in_flight.fetch_add(1);
    if (g_forking.load() == 0 || (deadline != 0 && monotonic_ns() >= deadline)) return;
    // A fork began meanwhile: out of its way until it is done.
    g_in_flight.fetch_sub(1);
    futex_wake_all(&g_in_flight, false);
  }
}

OwnWork::~OwnWork() {
  if (--t_own_depth != 0) return;
  g_in_flight.fetch_sub(1);
  if (g_forking.load() != 0) {
    const KeepErrno keep;
    futex_wake_all(&g_in_flight, false);
  }
}

void install_fork_handlers() noexcept {
  if (g_installed.load(std::memory_order_acquire) || g_installed.exchange(true)) return;
  pthread_atfork(prepare, parent, child);
}

}  // namespace slice::shim
