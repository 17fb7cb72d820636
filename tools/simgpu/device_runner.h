// Device time for one process on one simulated device. A device runs one process's work at a time
// (the token in DeviceState) and switches to another process that has work every time slice, as a
// GPU without MPS time-slices between contexts. A kernel of N ns holds the token for N ns of wall time.
#pragma once

#include <cstdint>

#include "machine_state.h"

namespace simgpu {

class DeviceRunner {
 public:
  DeviceRunner(Machine& machine, int device);

  // Runs `ns` of device time for this process, submitted at `ready_ns`, waiting for its turn on the
  // device as needed. Returns the monotonic time at which the work is finished on the device (may
  // be in the future).
  std::uint64_t run(std::uint64_t ns, std::uint64_t ready_ns);
  // Nothing more to run for now: wait until the device has finished, then let others run.
  void idle();
  bool holds_device() const { return held_; }
  // Sleeps until the monotonic clock reaches t (absolute).
  static void sleep_until(std::uint64_t t);

 private:
  void acquire();
  void hand_over();
  bool others_waiting() const;

  Machine& machine_;
  DeviceState& device_;
  int index_;
  std::uint32_t me_;  // slot + 1
  std::uint64_t slice_ns_;
  bool held_ = false;
  std::uint64_t clock_ = 0;  // when this process's submitted device work finishes
  std::uint64_t slice_end_ = 0;
};

}  // namespace simgpu
