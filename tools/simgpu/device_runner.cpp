#include "device_runner.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <climits>
#include <ctime>

namespace simgpu {

namespace {

constexpr std::uint64_t kLivenessCheckNs = 20'000'000;  // how often a waiter checks the holder is alive

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::uint64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000ull), static_cast<long>(timeout_ns % 1'000'000'000ull)};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace

DeviceRunner::DeviceRunner(Machine& machine, int device)
    : machine_(machine),
      device_(machine.state().devices[device]),
      index_(device),
      me_(static_cast<std::uint32_t>(machine.slot() + 1)),
      slice_ns_(std::uint64_t(machine.header().timeslice_us) * 1000) {}

void DeviceRunner::sleep_until(std::uint64_t t) {
  timespec ts{static_cast<time_t>(t / 1'000'000'000ull), static_cast<long>(t % 1'000'000'000ull)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

bool DeviceRunner::others_waiting() const {
  const int mine = static_cast<int>(me_ - 1);
  for (int w = 0; w < kWaiterWords; ++w) {
    std::uint64_t bits = device_.waiting[w].load();
    if (w == mine / 64) bits &= ~(1ull << (mine % 64));
    if (bits) return true;
  }
  return false;
}

void DeviceRunner::acquire() {
  const int mine = static_cast<int>(me_ - 1);
  const std::uint64_t wait_start = monotonic_ns();
  device_.waiting[mine / 64].fetch_or(1ull << (mine % 64));
  std::uint64_t last_check = wait_start;
  std::uint64_t start = 0;  // device time at which our work starts
  for (;;) {
    std::uint32_t owner = device_.owner.load();
    if (owner == me_) {  // handed to us: we run from the moment the previous context stopped
      start = std::max(wait_start, device_.handover_ns.load());
      break;
    }
    if (owner == 0) {
      if (device_.owner.compare_exchange_strong(owner, me_)) {
        start = monotonic_ns();
        break;
      }
      continue;
    }
    futex_wait(&device_.owner, owner, kLivenessCheckNs);
    const std::uint64_t now = monotonic_ns();
    if (now - last_check >= kLivenessCheckNs) {
      last_check = now;
      // A holder that died keeps the token forever unless someone takes it back: reaping its slot
      // returns the token (and its memory).
      std::uint32_t holder = device_.owner.load();
      if (holder != 0 && holder != me_ && !machine_.slot_alive(static_cast<int>(holder - 1))) {
        machine_.reap_slot(static_cast<int>(holder - 1));
        // Also when the slot was already free (its process exited while its executor ran).
        if (device_.owner.compare_exchange_strong(holder, 0)) futex_wake_all(&device_.owner);
      }
    }
  }
  device_.waiting[mine / 64].fetch_and(~(1ull << (mine % 64)));
  held_ = true;
  clock_ = start;
  slice_end_ = start + slice_ns_;
}

void DeviceRunner::hand_over() {
  // Round robin from the slot after ours, so every waiting process gets its turn.
  const int mine = static_cast<int>(me_ - 1);
  for (int step = 1; step < kMaxProcesses; ++step) {
    const int s = (mine + step) % kMaxProcesses;
    if (device_.waiting[s / 64].load() & (1ull << (s % 64))) {
      device_.handover_ns.store(clock_);
      device_.owner.store(static_cast<std::uint32_t>(s + 1));
      futex_wake_all(&device_.owner);
      held_ = false;
      return;
    }
  }
  // Nobody waits: give the device up; a waiter that arrives now sees 0 or is woken below.
  device_.owner.store(0);
  if (others_waiting()) futex_wake_all(&device_.owner);
  held_ = false;
}

std::uint64_t DeviceRunner::run(std::uint64_t ns, std::uint64_t ready_ns) {
  std::uint64_t remaining = ns;
  if (held_) {
    // A kernel starts when both it was submitted and the previous one finished; in between the
    // device sat idle. How late our own thread woke up does not matter: the device does not wait
    // for it.
    if (clock_ < ready_ns) clock_ = ready_ns;
    if (clock_ >= slice_end_) {
      if (others_waiting())
        hand_over();
      else
        slice_end_ = clock_ + slice_ns_;
    }
  }
  while (remaining > 0) {
    if (!held_) acquire();
    std::uint64_t chunk = slice_end_ - clock_;
    if (chunk > remaining) chunk = remaining;
    clock_ += chunk;
    remaining -= chunk;
    machine_.add_busy(index_, chunk, clock_);
    if (clock_ >= slice_end_) {
      // The slice is used up: the device really was busy until now, then another context may run.
      sleep_until(clock_);
      if (others_waiting()) {
        hand_over();
      } else {
        slice_end_ = clock_ + slice_ns_;
      }
    }
  }
  return clock_;
}

void DeviceRunner::idle() {
  if (!held_) return;
  sleep_until(clock_);
  hand_over();
}

}  // namespace simgpu
