// The simulated machine: one file (SIMGPU_STATE) mapped by every process that uses the simulated
// driver, holding the devices' memory, the device-time token and per-process ground truth.
//
// Liveness of a process is an open-file-description lock on its slot's byte of the state file: the
// kernel drops it when the process dies, whatever PID namespace it lives in, so a crashed process's
// memory and device token can always be taken back.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace simgpu {

constexpr std::uint32_t kStateMagic = 0x53494d47;  // "SIMG"
constexpr std::uint32_t kStateVersion = 4;         // 2: host_pid; 3: sm_count; 4: host_functions
constexpr int kMaxDevices = 8;
constexpr int kMaxProcesses = 1024;
constexpr int kWaiterWords = kMaxProcesses / 64;
constexpr int kUtilBuckets = 16;  // ring of 100 ms buckets: utilization samples
constexpr std::uint64_t kUtilBucketNs = 100'000'000;
constexpr std::uint64_t kMemoryGranularity = 2ull << 20;  // VMM and pool granularity, as on real GPUs

struct UtilBucket {
  std::atomic<std::uint64_t> epoch;  // now_ns / kUtilBucketNs this bucket holds
  std::atomic<std::uint64_t> busy_ns;
};

struct SlotDeviceStats {
  std::atomic<std::uint64_t> memory_bytes;
  std::atomic<std::uint64_t> kernels;
  std::atomic<std::uint64_t> busy_ns;
  std::atomic<std::uint64_t> host_functions;  // cuLaunchHostFunc and cuStreamAddCallback calls queued
  UtilBucket util[kUtilBuckets];
};

struct ProcessSlot {
  std::atomic<std::int32_t> pid;  // 0: free; as the owner sees itself
  // The same process in the outermost PID namespace (NSpid's first field): what NVML reports, as the
  // real one reports host PIDs, so that a process in a PID namespace does not find itself there.
  std::atomic<std::int32_t> host_pid;
  std::atomic<std::uint64_t> start_ns;  // CLOCK_MONOTONIC when attached
  char name[32];
  SlotDeviceStats dev[kMaxDevices];
};

struct DeviceState {
  pthread_mutex_t memory_lock;  // robust and process-shared: guards used_bytes and slot memory
  std::uint64_t total_bytes;
  std::uint64_t used_bytes;
  // The device-time token: slot+1 of the process whose context runs, 0 when idle. Waiters sleep on
  // it with a futex and set their bit in `waiting`.
  std::atomic<std::uint32_t> owner;
  std::atomic<std::uint64_t> waiting[kWaiterWords];
  // The device clock at the last hand-over: the next context's work starts there, however late
  // its process wakes, since a real GPU switches contexts in microseconds.
  std::atomic<std::uint64_t> handover_ns;
  std::atomic<std::uint64_t> busy_ns;
  std::atomic<std::uint64_t> kernels;
  std::atomic<std::uint64_t> lock_recoveries;  // times memory_lock's holder died inside it
  UtilBucket util[kUtilBuckets];
};

struct MachineHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t file_size;
  std::uint32_t device_count;
  std::uint32_t timeslice_us;
  std::uint64_t context_bytes;
  std::uint64_t memory_bytes[kMaxDevices];
  // Multiprocessors per device: its speed, by which CUDA_DEVICE_ORDER=FASTEST_FIRST orders devices.
  std::uint32_t sm_count[kMaxDevices];
};

struct MachineState {
  MachineHeader header;
  DeviceState devices[kMaxDevices];
  ProcessSlot slots[kMaxProcesses];
};

// The machine as configured by the environment (SIMGPU_DEVICES, SIMGPU_MEMORY, ...).
struct MachineConfig {
  std::uint32_t device_count = 1;
  std::uint64_t memory_bytes[kMaxDevices] = {};
  std::uint32_t timeslice_us = 2000;
  std::uint64_t context_bytes = 0;
  std::uint32_t sm_count[kMaxDevices] = {};
  std::string state_path = "/dev/shm/simgpu";
};

// Parses the SIMGPU_* variables; on a bad value returns false with a message naming it.
bool read_machine_config(MachineConfig& out, std::string& error);
// Parses "24Gi", "512Mi", "4G", "1073741824", "1.5Gi"; false on anything else or overflow.
bool parse_quantity(const std::string& text, std::uint64_t& bytes);

std::uint64_t monotonic_ns();

// A process's view of the machine. `attach` maps (creating or re-creating a stale file when no live
// process uses it); `claim_slot` makes this process a live participant.
class Machine {
 public:
  static Machine* attach(const MachineConfig& config, std::string& error);
  MachineState& state() { return *state_; }
  const MachineHeader& header() const { return state_->header; }
  int device_count() const { return static_cast<int>(state_->header.device_count); }

  bool claim_slot(std::string& error);
  int slot() const { return slot_.load(); }
  void release_own_slot();  // normal exit: give back memory and token

  // Memory: charge/uncharge this process for `bytes` on `device`; false when the device is full.
  bool charge(int device, std::uint64_t bytes);
  void uncharge(int device, std::uint64_t bytes);
  void memory_info(int device, std::uint64_t& free_bytes, std::uint64_t& total_bytes);

  // Liveness and reaping of other processes' slots.
  bool slot_alive(int slot) const;
  int reap_dead_slots();     // returns how many slots were reaped
  bool reap_slot(int slot);  // true if the slot was dead and is now free

  void add_busy(int device, std::uint64_t ns, std::uint64_t now);
  // Busy nanoseconds over the `window_ns` before now, from the 100 ms buckets.
  std::uint64_t recent_busy(const UtilBucket* buckets, std::uint64_t window_ns, std::uint64_t now) const;

  int fd() const { return fd_; }
  void forget_after_fork();

 private:
  Machine() = default;
  bool lock_slot_byte(int slot) const;
  void unlock_slot_byte(int slot) const;
  void lock_memory(int device);
  void unlock_memory(int device);
  void reap_locked_slot(int slot);

  MachineState* state_ = nullptr;
  int fd_ = -1;
  std::atomic<int> slot_{-1};  // read by executor threads while an exiting main thread clears it
};

}  // namespace simgpu
