#include "machine_state.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace simgpu {

namespace {

// Byte offsets of the advisory locks. They lie far past the end of the file: fcntl locks need no data.
constexpr off_t kSlotLockBase = off_t{1} << 40;
constexpr off_t kInitLockByte = kSlotLockBase - 1;

bool ofd_lock(int fd, off_t start, off_t len, short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = len;
  return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

// True when some other open file description holds a lock in [start, start+len).
bool ofd_locked_by_other(int fd, off_t start, off_t len) {
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = len;
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;  // cannot tell: assume alive, never reap wrongly
  return fl.l_type != F_UNLCK;
}

void init_robust_mutex(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
  pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

bool config_matches(const MachineHeader& h, const MachineConfig& c) {
  if (h.device_count != c.device_count || h.timeslice_us != c.timeslice_us || h.context_bytes != c.context_bytes)
    return false;
  for (std::uint32_t d = 0; d < c.device_count; ++d)
    if (h.memory_bytes[d] != c.memory_bytes[d] || h.sm_count[d] != c.sm_count[d]) return false;
  return true;
}

void initialize_state(MachineState* s, const MachineConfig& c) {
  std::memset(static_cast<void*>(s), 0, sizeof(MachineState));
  s->header.magic = kStateMagic;
  s->header.version = kStateVersion;
  s->header.file_size = sizeof(MachineState);
  s->header.device_count = c.device_count;
  s->header.timeslice_us = c.timeslice_us;
  s->header.context_bytes = c.context_bytes;
  for (std::uint32_t d = 0; d < c.device_count; ++d) {
    s->header.memory_bytes[d] = c.memory_bytes[d];
    s->header.sm_count[d] = c.sm_count[d];
    s->devices[d].total_bytes = c.memory_bytes[d];
    init_robust_mutex(&s->devices[d].memory_lock);
  }
}

void read_process_name(char* out, std::size_t cap) {
  std::memset(out, 0, cap);
  int fd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, out, cap - 1);
  close(fd);
  if (n > 0 && out[n - 1] == '\n') out[n - 1] = '\0';
}

}  // namespace

std::uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}

bool parse_quantity(const std::string& text, std::uint64_t& bytes) {
  if (text.empty()) return false;
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string number = text.substr(0, i);
  const std::string unit = text.substr(i);
  if (number.empty() || number == "." || number.find('.') != number.rfind('.')) return false;
  struct Unit {
    const char* name;
    long double factor;
  };
  static const Unit units[] = {
      {"", 1},
      {"B", 1},
      {"Ki", 1024.0L},
      {"Mi", 1048576.0L},
      {"Gi", 1073741824.0L},
      {"Ti", 1099511627776.0L},
      {"KiB", 1024.0L},
      {"MiB", 1048576.0L},
      {"GiB", 1073741824.0L},
      {"TiB", 1099511627776.0L},
      {"K", 1e3L},
      {"M", 1e6L},
      {"G", 1e9L},
      {"T", 1e12L},
  };
  for (const Unit& u : units) {
    if (unit != u.name) continue;
    char* end = nullptr;
    long double v = std::strtold(number.c_str(), &end);
    if (end != number.c_str() + number.size()) return false;
    long double total = std::floor(v * u.factor);
    if (!(total >= 0) || total > 18446744073709551615.0L) return false;
    bytes = static_cast<std::uint64_t>(total);
    return true;
  }
  return false;
}

bool read_machine_config(MachineConfig& out, std::string& error) {
  MachineConfig c;
  for (int d = 0; d < kMaxDevices; ++d) c.memory_bytes[d] = 24ull << 30, c.sm_count[d] = 128;
  if (const char* v = std::getenv("SIMGPU_DEVICES"); v && *v) {
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end || n < 1 || n > kMaxDevices) {
      error = std::string("SIMGPU_DEVICES='") + v + "' is not a device count from 1 to " + std::to_string(kMaxDevices) +
              " (example: SIMGPU_DEVICES=2)";
      return false;
    }
    c.device_count = static_cast<std::uint32_t>(n);
  }
  if (const char* v = std::getenv("SIMGPU_MEMORY"); v && *v) {
    std::string list = v;
    std::uint64_t last = 0;
    int d = 0;
    for (std::size_t pos = 0; pos <= list.size() && d < kMaxDevices; ++d) {
      std::size_t comma = list.find(',', pos);
      std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      if (!parse_quantity(item, last) || last == 0) {
        error = std::string("SIMGPU_MEMORY='") + v + "' is not a memory size or comma list of sizes " +
                "(example: SIMGPU_MEMORY=24Gi or SIMGPU_MEMORY=8Gi,16Gi)";
        return false;
      }
      c.memory_bytes[d] = last;
      if (comma == std::string::npos) {
        ++d;
        break;
      }
      pos = comma + 1;
    }
    for (; d < kMaxDevices; ++d) c.memory_bytes[d] = last;  // the last size applies to the rest
  }
  if (const char* v = std::getenv("SIMGPU_SM_COUNT"); v && *v) {
    // Like SIMGPU_MEMORY: one count for every device, or a comma list whose last count applies on.
    std::string list = v;
    long last = 0;
    int d = 0;
    for (std::size_t pos = 0; d < kMaxDevices; ++d) {
      const std::size_t comma = list.find(',', pos);
      const std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      char* end = nullptr;
      last = std::strtol(item.c_str(), &end, 10);
      if (item.empty() || *end || last < 1 || last > 1024) {
        error = std::string("SIMGPU_SM_COUNT='") + v + "' is not a multiprocessor count from 1 to 1024 or a comma " +
                "list of them (example: SIMGPU_SM_COUNT=64,128)";
        return false;
      }
      c.sm_count[d] = static_cast<std::uint32_t>(last);
      if (comma == std::string::npos) {
        ++d;
        break;
      }
      pos = comma + 1;
    }
    for (; d < kMaxDevices; ++d) c.sm_count[d] = static_cast<std::uint32_t>(last);
  }
  if (const char* v = std::getenv("SIMGPU_TIMESLICE_US"); v && *v) {
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (*end || n < 100 || n > 1'000'000) {
      error = std::string("SIMGPU_TIMESLICE_US='") + v +
              "' is not a time slice from 100 to 1000000 microseconds (example: SIMGPU_TIMESLICE_US=2000)";
      return false;
    }
    c.timeslice_us = static_cast<std::uint32_t>(n);
  }
  if (const char* v = std::getenv("SIMGPU_CONTEXT_BYTES"); v && *v) {
    if (!parse_quantity(v, c.context_bytes)) {
      error = std::string("SIMGPU_CONTEXT_BYTES='") + v + "' is not a memory size (example: 300Mi)";
      return false;
    }
  }
  if (const char* v = std::getenv("SIMGPU_STATE"); v && *v) c.state_path = v;
  out = c;
  return true;
}

Machine* Machine::attach(const MachineConfig& config, std::string& error) {
  int fd = open(config.state_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) {
    error = "SIMGPU_STATE='" + config.state_path + "': cannot open: " + std::strerror(errno);
    return nullptr;
  }
  fchmod(fd, 0666);  // the simulated machine is shared by every user, as a real GPU is
  // The init lock is only held for a few system calls; poll it with a deadline instead of blocking.
  const std::uint64_t deadline = monotonic_ns() + 5'000'000'000ull;
  while (!ofd_lock(fd, kInitLockByte, 1, F_WRLCK)) {
    if (monotonic_ns() > deadline) {
      error = "SIMGPU_STATE='" + config.state_path + "': initialisation lock held for over 5 s";
      close(fd);
      return nullptr;
    }
    usleep(1000);
  }
  struct stat st {};
  fstat(fd, &st);
  MachineHeader h{};
  bool valid = st.st_size == static_cast<off_t>(sizeof(MachineState)) &&
               pread(fd, &h, sizeof h, 0) == static_cast<ssize_t>(sizeof h) && h.magic == kStateMagic &&
               h.version == kStateVersion && h.file_size == sizeof(MachineState) && h.device_count >= 1 &&
               h.device_count <= kMaxDevices;
  const bool in_use = ofd_locked_by_other(fd, kSlotLockBase, kMaxProcesses);
  bool fresh = false;
  if (!valid) {
    if (in_use && st.st_size != 0) {
      error = "SIMGPU_STATE='" + config.state_path +
              "' is in use by a live process but is not a simgpu state file of this version";
      ofd_lock(fd, kInitLockByte, 1, F_UNLCK);
      close(fd);
      return nullptr;
    }
    fresh = true;
  } else if (!in_use && !config_matches(h, config)) {
    fresh = true;  // a stale machine from an earlier run with other settings: build the one asked for
  }
  if (fresh && (ftruncate(fd, 0) != 0 || ftruncate(fd, sizeof(MachineState)) != 0)) {
    error = "SIMGPU_STATE='" + config.state_path + "': cannot size the file: " + std::strerror(errno);
    ofd_lock(fd, kInitLockByte, 1, F_UNLCK);
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, sizeof(MachineState), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    error = "SIMGPU_STATE='" + config.state_path + "': cannot map: " + std::strerror(errno);
    ofd_lock(fd, kInitLockByte, 1, F_UNLCK);
    close(fd);
    return nullptr;
  }
  auto* state = static_cast<MachineState*>(p);
  if (fresh) initialize_state(state, config);
  ofd_lock(fd, kInitLockByte, 1, F_UNLCK);
  auto* m = new Machine();
  m->state_ = state;
  m->fd_ = fd;
  return m;
}

bool Machine::lock_slot_byte(int slot) const { return ofd_lock(fd_, kSlotLockBase + slot, 1, F_WRLCK); }

void Machine::unlock_slot_byte(int slot) const { ofd_lock(fd_, kSlotLockBase + slot, 1, F_UNLCK); }

bool Machine::slot_alive(int slot) const {
  if (slot < 0 || slot >= kMaxProcesses) return false;
  if (slot == slot_) return true;
  return ofd_locked_by_other(fd_, kSlotLockBase + slot, 1);
}

namespace {
// This process's PID in the outermost PID namespace: the first field of NSpid in /proc/self/status
// (the last is getpid()); getpid() where the kernel does not say.
std::int32_t outermost_pid() {
  std::int32_t pid = static_cast<std::int32_t>(getpid());
  if (FILE* f = std::fopen("/proc/self/status", "re")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, "NSpid:", 6) == 0) {
        pid = static_cast<std::int32_t>(std::strtol(line + 6, nullptr, 10));
        break;
      }
    std::fclose(f);
  }
  return pid;
}
}  // namespace

bool Machine::claim_slot(std::string& error) {
  if (slot_ >= 0) return true;
  for (int i = 0; i < kMaxProcesses; ++i) {
    if (!lock_slot_byte(i)) continue;  // a live process holds it
    ProcessSlot& s = state_->slots[i];
    if (s.pid.load() != 0) reap_locked_slot(i);  // left by a process that died
    read_process_name(s.name, sizeof s.name);
    s.start_ns.store(monotonic_ns());
    s.pid.store(static_cast<std::int32_t>(getpid()));
    s.host_pid.store(outermost_pid());
    slot_ = i;
    return true;
  }
  error = "the simulated machine has no free process slot (" + std::to_string(kMaxProcesses) + " in use)";
  return false;
}

void Machine::lock_memory(int device) {
  DeviceState& d = state_->devices[device];
  if (pthread_mutex_lock(&d.memory_lock) == EOWNERDEAD) {
    // Its holder died inside the critical section: rebuild the total from the slots, which each
    // change only under this lock, so the sum is the truth.
    std::uint64_t sum = 0;
    for (ProcessSlot& s : state_->slots) sum += s.dev[device].memory_bytes.load();
    d.used_bytes = sum;
    d.lock_recoveries.fetch_add(1);
    pthread_mutex_consistent(&d.memory_lock);
  }
}

void Machine::unlock_memory(int device) { pthread_mutex_unlock(&state_->devices[device].memory_lock); }

bool Machine::charge(int device, std::uint64_t bytes) {
  const int slot = slot_.load();
  if (slot < 0) return false;
  DeviceState& d = state_->devices[device];
  lock_memory(device);
  bool ok = d.used_bytes <= d.total_bytes && bytes <= d.total_bytes - d.used_bytes;
  if (ok) {
    d.used_bytes += bytes;
    state_->slots[slot].dev[device].memory_bytes.fetch_add(bytes);
  }
  unlock_memory(device);
  return ok;
}

void Machine::uncharge(int device, std::uint64_t bytes) {
  const int slot = slot_.load();
  if (slot < 0) return;
  DeviceState& d = state_->devices[device];
  lock_memory(device);
  auto& mine = state_->slots[slot].dev[device].memory_bytes;
  std::uint64_t take = bytes <= mine.load() ? bytes : mine.load();
  mine.fetch_sub(take);
  d.used_bytes -= take <= d.used_bytes ? take : d.used_bytes;
  unlock_memory(device);
}

void Machine::memory_info(int device, std::uint64_t& free_bytes, std::uint64_t& total_bytes) {
  DeviceState& d = state_->devices[device];
  lock_memory(device);
  total_bytes = d.total_bytes;
  free_bytes = d.used_bytes >= d.total_bytes ? 0 : d.total_bytes - d.used_bytes;
  unlock_memory(device);
}

void Machine::reap_locked_slot(int slot) {
  ProcessSlot& s = state_->slots[slot];
  for (std::uint32_t dev = 0; dev < state_->header.device_count; ++dev) {
    DeviceState& d = state_->devices[dev];
    lock_memory(static_cast<int>(dev));
    std::uint64_t held = s.dev[dev].memory_bytes.load();
    d.used_bytes -= held <= d.used_bytes ? held : d.used_bytes;
    s.dev[dev].memory_bytes.store(0);
    unlock_memory(static_cast<int>(dev));
    s.dev[dev].kernels.store(0);
    s.dev[dev].busy_ns.store(0);
    s.dev[dev].host_functions.store(0);
    for (UtilBucket& b : s.dev[dev].util) b.epoch.store(0), b.busy_ns.store(0);
    d.waiting[slot / 64].fetch_and(~(1ull << (slot % 64)));
    std::uint32_t owner = static_cast<std::uint32_t>(slot + 1);
    if (d.owner.compare_exchange_strong(owner, 0)) futex_wake_all(&d.owner);
  }
  s.pid.store(0);
  s.host_pid.store(0);
}

bool Machine::reap_slot(int slot) {
  if (slot < 0 || slot >= kMaxProcesses || slot == slot_) return false;
  if (state_->slots[slot].pid.load() == 0) return false;
  if (!lock_slot_byte(slot)) return false;  // alive
  bool reaped = state_->slots[slot].pid.load() != 0;
  if (reaped) reap_locked_slot(slot);
  unlock_slot_byte(slot);
  return reaped;
}

int Machine::reap_dead_slots() {
  int n = 0;
  for (int i = 0; i < kMaxProcesses; ++i)
    if (i != slot_ && state_->slots[i].pid.load() != 0 && reap_slot(i)) ++n;
  return n;
}

void Machine::release_own_slot() {
  const int slot = slot_.exchange(-1);
  if (slot < 0) return;
  reap_locked_slot(slot);
  unlock_slot_byte(slot);
}

void Machine::forget_after_fork() {
  // The child shares the parent's open file description, and with it the parent's slot lock: drop
  // the child's reference so the parent's death is still seen. The child attaches anew if it uses us.
  // The mapping holds the description too (and with it the lock): unmap as well. Nothing of the
  // parent's driver state is used in the child, which attaches anew.
  if (state_) munmap(state_, sizeof(MachineState));
  state_ = nullptr;
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  slot_ = -1;
}

namespace {
void add_to_bucket(UtilBucket* buckets, std::uint64_t ns, std::uint64_t now) {
  const std::uint64_t epoch = now / kUtilBucketNs;
  UtilBucket& b = buckets[epoch % kUtilBuckets];
  std::uint64_t seen = b.epoch.load();
  if (seen != epoch && b.epoch.compare_exchange_strong(seen, epoch)) {
    b.busy_ns.store(ns);  // a new 100 ms period starts in this bucket
    return;
  }
  b.busy_ns.fetch_add(ns);
}
}  // namespace

void Machine::add_busy(int device, std::uint64_t ns, std::uint64_t now) {
  const int slot = slot_.load();
  if (slot < 0) return;  // the process is exiting and has given its slot back
  DeviceState& d = state_->devices[device];
  SlotDeviceStats& s = state_->slots[slot].dev[device];
  s.busy_ns.fetch_add(ns);
  d.busy_ns.fetch_add(ns);
  add_to_bucket(s.util, ns, now);
  add_to_bucket(d.util, ns, now);
}

std::uint64_t Machine::recent_busy(const UtilBucket* buckets, std::uint64_t window_ns, std::uint64_t now) const {
  // Whole buckets before the current one, so a reading covers exactly window_ns of the past.
  const std::uint64_t current = now / kUtilBucketNs;
  std::uint64_t count = window_ns / kUtilBucketNs;
  if (count > kUtilBuckets - 1) count = kUtilBuckets - 1;
  std::uint64_t sum = 0;
  for (std::uint64_t e = current - count; e < current; ++e) {
    const UtilBucket& b = buckets[e % kUtilBuckets];
    if (b.epoch.load() == e) sum += b.busy_ns.load();
  }
  return sum;
}

}  // namespace simgpu
