// The coordinator's shared files: their binary layout and every size limit, in one place.
//
// SLICE_COORDINATOR_DIR/
//   tenants/<name>   one file per tenant, created by its first process and writable only by that
//                    process's user (or, for a tenant a policy manages, made by root at boot and
//                    writable by the policy's group): its registered limits, its usage per device,
//                    its process slots
//   locks/<name>     its lock file: the registration lock and the slots' locks (coordinator_folder.h)
//
// Policies live apart, in SLICE_POLICY_DIR (persistent, root's; see policy.h): this folder is
// volatile.
//
// Usage and limits live apart: a tenant's processes write only their own tenant file, so no tenant
// can free another's usage, and a limit an administrator set lives where tenants cannot write.
// Liveness of a process is an open-file-description lock on its slot's byte of the tenant's lock
// file (locks/<name>, open only to the tenant's writers): the kernel drops it when the process dies,
// in whatever PID namespace.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "config_values.h"

namespace slice {

constexpr std::uint32_t kTenantMagic = 0x544c4353;  // "SCLT"
// 2: IPC exports, compute; 3: usage records; 4: 4096 IPC exports, withdrawn at free; overhead;
// 5: DeviceEntry::turn_seq; 6: the slot and registration locks in the lock file (locks/<tenant>),
// not in the tenant file: two versions that looked for them in different files must not share one
constexpr std::uint32_t kTenantVersion = 6;
constexpr int kMaxDevices = 16;      // distinct GPUs (by UUID) a tenant can use
constexpr int kMaxProcesses = 1024;  // process slots per tenant
constexpr int kMaxTenants = 256;     // the scale the tests hold one GPU to (scale_test); not a limit
constexpr int kTenantNameMax = static_cast<int>(kMaxTenantNameLength);  // also a file name
constexpr int kDeviceNameMax = 95;
constexpr int kIpcExports = 4096;  // remembered CUDA IPC exports per tenant (see TenantFile)
constexpr int kIpcProbe = 64;      // entries an export may take, from its digest's home on
constexpr std::uint64_t kNoLimit = ~0ull;

// A share or limit as read from a tenant file, which its own processes may have written anything
// into: a percent, 1-100.
constexpr std::uint32_t valid_percent(std::uint32_t v) { return v < 1 ? 1 : v > 100 ? 100 : v; }

// Byte offsets of the advisory locks: far past the end of the file, which fcntl locks allow.
constexpr std::int64_t kInitLockByte = std::int64_t{1} << 40;
constexpr std::int64_t kSlotLockBase = kInitLockByte + 1;

// Limits as a tenant registered them (its first process's environment) or as policy sets them.
struct Limits {
  std::uint64_t memory_bytes[kMaxDevices];  // per device entry of the tenant file; kNoLimit: none
  std::uint32_t compute_share;              // percent 1-100 (read through valid_percent)
  std::uint32_t compute_limit;              // percent 1-100
  std::uint32_t priority;                   // stored_priority(): a zeroed file means normal
  std::uint32_t reserved;
  std::uint32_t compute_shares[kMaxDevices];  // per device entry (SLICE_COMPUTE_SHARE_<n>); 0: compute_share
};

// Priorities as the files store them: never renumber.
constexpr std::uint32_t stored_priority(Priority p) { return p == Priority::high ? 1 : p == Priority::low ? 2 : 0; }
constexpr Priority priority_from_stored(std::uint32_t v) {
  return v == 1 ? Priority::high : v == 2 ? Priority::low : Priority::normal;
}

struct DeviceEntry {
  // 0 free, 1 being claimed, 2 in use. Claimed by CAS, so processes that meet a new GPU at the
  // same time agree on one entry for it.
  std::atomic<std::uint32_t> state;
  std::uint32_t reserved;
  std::uint8_t uuid[16];
  char name[kDeviceNameMax + 1];
  std::uint64_t total_bytes;
  // Bytes the tenant holds on this device. Changed by compare-and-swap against the cap, so two
  // processes racing can never together pass it.
  std::atomic<std::uint64_t> used;
  // Compute: written by the tenant's own processes, read by every process on the GPU (with pread,
  // never loaded through a mapping: a file its tenant truncated must not fault a reader; turn_seq
  // is also waited on through one, where only the kernel reads it: futex.h).
  std::atomic<std::uint64_t> received_ns;  // device time the tenant received here, cumulative
  // Its live processes with work on this GPU now / with work held back by libslice: counted from
  // the slots' compute flags by the tenant's own watchers, so a process that dies drops out.
  std::atomic<std::uint32_t> active_processes;
  std::atomic<std::uint32_t> wanting_processes;
  // When a process last confirmed each (monotonic clock, the same in every process of a machine):
  // a count left by a process that died or stopped goes stale instead of blocking others.
  std::atomic<std::uint64_t> active_heartbeat_ns;
  std::atomic<std::uint64_t> wanting_heartbeat_ns;
  // The tenant's effective compute settings (an administrator's policy applied), for the others.
  std::atomic<std::uint32_t> compute_share;
  std::atomic<std::uint32_t> compute_limit;
  std::atomic<std::uint32_t> compute_priority;  // stored_priority()
  // When a process of the tenant last joined on this GPU (monotonic clock in ms, wrapping; 0 never
  // written): a high-priority newcomer counts as present before its first kernel, so lower tenants
  // shorten their queues before its first request rather than after it.
  std::atomic<std::uint32_t> joined_ms;
  // Bumped, and its sleepers woken (a futex: futex.h), when the tenant starts or stops wanting the
  // device (active or wanting processes), starts yielding it, or its work ends as it yields. A
  // tenant waiting for the device sleeps on it instead of reading this file again and again.
  std::atomic<std::uint32_t> turn_seq;
  std::uint32_t reserved2;
  // While the tenant yields the device with work still queued: when that work should be done
  // (monotonic ns; 0 otherwise). The tenant next in line sleeps until shortly before, then looks
  // closely, so that the device idles as little as possible at the change of turns.
  std::atomic<std::uint64_t> drain_eta_ns;
};

// Milliseconds of the monotonic clock, as joined_ms stores them (wraps every 49 days; compare by
// difference). Never 0, which means "never".
inline std::uint32_t joined_stamp_ms(std::uint64_t monotonic_ns) {
  const auto ms = static_cast<std::uint32_t>(monotonic_ns / 1'000'000);
  return ms == 0 ? 1 : ms;
}

// Metering, for chargeback: the memory a tenant held on one device, integrated over time, as
// byte-nanoseconds = units * 2^kMemoryUnitShift + (fraction mod 2^kMemoryUnitShift). A unit is
// 2^40 byte-ns (about 1100 byte-seconds), so `units` lasts some 3000 years at 200 GiB held (plain
// byte-seconds in 64 bits would wrap in under three). `fraction` runs freely and wraps: each adder
// carries into `units` the boundary its own addition crossed, so nothing is lost or counted twice.
// Each process integrates its own memory (SlotDevice::accrued_ns): a process that dies stops being
// charged, where a tenant-wide integral would charge its memory until someone reaps it.
constexpr int kMemoryUnitShift = 40;
struct MemoryMeter {
  std::atomic<std::uint64_t> units;
  std::atomic<std::uint64_t> fraction;
  // Monotonic time at which the next usage sample is due (0: at once): a load per change, no clock.
  std::atomic<std::uint64_t> next_sample_ns;
  std::uint64_t reserved;
};

// The history of the cumulative counters, for `slicectl usage --since`: about one sample per
// wall-clock hour (CLOCK_REALTIME: a --since TIME is a date), written by whichever process of the
// tenant first accrues or ticks in a new hour, kept for kUsageSamples hours. An hour without any
// activity has no sample; readers interpolate between the samples there are.
constexpr int kUsageSamples = 24 * 35;  // 35 days: a monthly billing period and some margin
constexpr std::uint64_t kUsageStepSeconds = 3600;
struct UsageSample {
  std::atomic<std::uint64_t> device_ns;     // received_ns then
  std::atomic<std::uint64_t> memory_units;  // MemoryMeter::units then
  // Written last (0 while the other two are written): wall-clock milliseconds when it was taken.
  std::atomic<std::uint64_t> wall_ms;
};
struct UsageRecord {
  MemoryMeter memory;
  std::atomic<std::uint64_t> newest_step;    // wall seconds / kUsageStepSeconds of the newest sample; 0: none
  std::atomic<std::uint64_t> first_wall_ms;  // when the first sample was taken: the record's start
  UsageSample samples[kUsageSamples];        // the sample of step s at [s % kUsageSamples]
};

// Samples of a tenant's received_ns on one device, one per kHistoryStepNs, for `slicectl status`
// (the share received over the last second and ten seconds, measured as the scheduler measures it).
constexpr int kHistorySamples = 48;  // 12 s at 250 ms
constexpr std::uint64_t kHistoryStepNs = 250'000'000;
struct ReceivedHistory {
  std::atomic<std::uint64_t> step;                       // index of the newest sample's step (at / kHistoryStepNs)
  std::atomic<std::uint64_t> total_ns[kHistorySamples];  // received_ns at the start of step s: [s % kHistorySamples]
  // The last record, at whatever time: after it nothing was received unless received_ns says so
  // (a tenant whose processes are gone stops here, and its window empties as time passes).
  std::atomic<std::uint64_t> updated_ns;
  std::atomic<std::uint64_t> updated_total_ns;
};

struct SlotDevice {
  std::atomic<std::uint64_t> used;        // what this process holds on the device
  std::atomic<std::uint64_t> flight;      // changes under way (by any thread): `used` and the tenant's total
  std::atomic<std::uint32_t> compute;     // kSlotActive | kSlotWanting: what this process's watcher saw last
  std::atomic<std::uint32_t> reconciled;  // kReconciled*: whether `overhead` below was measured
  // Monotonic time up to which `used` is integrated into the tenant's MemoryMeter (0: not yet).
  // Claimed by compare-and-swap, by the process before each change of `used` and by a sampler.
  std::atomic<std::uint64_t> accrued_ns;
  // Of `used`: what the driver holds for this process beyond what libslice's hooks charged (module
  // globals, heap and stack, local memory...), as reconciled with the driver's own per-process
  // figure (shim/reconcile.cpp). Charged like any memory, and shown apart.
  std::atomic<std::uint64_t> overhead;
};
constexpr std::uint32_t kReconciledNever = 0;         // not compared with the driver's figure yet
constexpr std::uint32_t kReconciledMeasured = 1;      // `overhead` is the last comparison's
constexpr std::uint32_t kReconciledUnmeasurable = 2;  // NVML cannot see this process (a PID namespace)
constexpr std::uint32_t kSlotActive = 1;              // has work on the device
constexpr std::uint32_t kSlotWanting = 2;             // has work held back by libslice

enum class SlotState : std::uint32_t { free = 0, live = 1 };

struct ProcessSlot {
  std::atomic<SlotState> state;
  std::atomic<std::int32_t> pid;  // as the process sees itself (its own PID namespace)
  std::atomic<std::uint64_t> started_ns;
  char comm[16];
  SlotDevice devices[kMaxDevices];
};

struct TenantHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::uint64_t file_size;
  char name[kTenantNameMax + 1];
  std::uint32_t owner_uid;
  // 0: no limits yet; 1: the first process is writing them; 2: registered.
  std::atomic<std::uint32_t> limits_state;
  Limits registered;
  // Slot+1 of the process recounting the tenant's usage from its live processes; 0 when none.
  std::atomic<std::uint32_t> recount_owner;
  // 1 when a recount could not finish or a dead slot was taken over: the next refusal recounts.
  std::atomic<std::uint32_t> needs_recount;
  std::atomic<std::uint64_t> recounts;  // how many recounts have completed (tests, status)
};

// CUDA IPC memory a process of the tenant exported (cuIpcGetMemHandle): a 53-bit digest of the
// handle and the exporter's slot + 1 (11 bits), 0 when empty. A process that opens a handle charges
// it only when it is not in its own tenant's table with a live exporter: the memory is already
// charged to the tenant once. An export takes a free entry among the kIpcProbe from its digest's
// home (one whose exporter is gone counts as free), never another live export's, and is cleared
// when its memory is freed.
struct TenantFile {
  TenantHeader header;
  DeviceEntry devices[kMaxDevices];
  ProcessSlot slots[kMaxProcesses];
  std::atomic<std::uint64_t> ipc_exports[kIpcExports];
  ReceivedHistory history[kMaxDevices];  // per device entry
  UsageRecord usage[kMaxDevices];        // per device entry: metering (kept after the processes exit)
};

// The layout every process of a machine shares (kTenantVersion names it): the words a futex waits
// on 4-aligned, the 8-byte counters 8-aligned.
static_assert(sizeof(DeviceEntry) == 200 && alignof(DeviceEntry) == 8, "DeviceEntry's layout is kTenantVersion's");
static_assert(offsetof(DeviceEntry, turn_seq) == 184 && offsetof(DeviceEntry, drain_eta_ns) == 192,
              "DeviceEntry's layout is kTenantVersion's");
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared counters must be lock-free");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "shared counters must be lock-free");

}  // namespace slice
