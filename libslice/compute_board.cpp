#include "compute_board.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "coordinator_layout.h"
#include "tenant_file.h"

namespace slice {
namespace {

constexpr std::uint64_t kRescanNs = 100'000'000;
constexpr std::uint64_t kLookNs = 1'000'000;
// The header and the device entries: all a reader needs, one pread.
constexpr std::size_t kReadBytes = offsetof(TenantFile, slots);

bool fresh(std::uint64_t heartbeat, std::uint64_t now) {
  return heartbeat <= now + kComputeHeartbeatNs && now <= heartbeat + kComputeHeartbeatNs;
}

std::uint32_t percent(std::uint32_t v) { return std::clamp<std::uint32_t>(v, 1, 100); }

}  // namespace

// The buffers' storage comes from operator new, aligned for any fundamental type: enough for the
// 8-byte atomics loaded from them.
ComputeBoard::ComputeBoard(std::string dir, std::string self) : dir_(std::move(dir)), self_(std::move(self)) {
  start_buffer_.resize(kReadBytes);
  history_buffer_.resize(sizeof(ReceivedHistory));
  entry_buffer_.resize(sizeof(DeviceEntry));
}

ComputeBoard::~ComputeBoard() {
  for (File& f : files_) ::close(f.fd);
}

void ComputeBoard::rescan(std::uint64_t now_ns) {
  const std::string folder = dir_ + "/tenants";
  if (scanned_ && now_ns < scanned_ns_ + kRescanNs) {
    if (now_ns < looked_ns_ + kLookNs) return;
    looked_ns_ = now_ns;
    struct stat st {};
    if (::stat(folder.c_str(), &st) != 0) return;
    const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
    if (mtime == folder_mtime_ns_) return;  // no tenant came or went
  }
  scanned_ = true;
  scanned_ns_ = looked_ns_ = now_ns;
  struct stat st {};
  if (::stat(folder.c_str(), &st) == 0)
    folder_mtime_ns_ = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  DIR* d = ::opendir(folder.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.' && e->d_name != self_ && valid_tenant_name(e->d_name)) names.emplace_back(e->d_name);
  ::closedir(d);
  // Keep what is still there, open what is new, close what is gone.
  std::vector<File> kept;
  for (File& f : files_) {
    if (std::find(names.begin(), names.end(), f.name) != names.end()) kept.push_back(f);
    else ::close(f.fd);
  }
  for (const std::string& n : names) {
    if (std::any_of(kept.begin(), kept.end(), [&](const File& f) { return f.name == n; })) continue;
    const int fd = ::open((folder + "/" + n).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    File f;
    f.name = n;
    f.fd = fd;
    kept.push_back(std::move(f));
  }
  files_ = std::move(kept);
}

std::uint64_t received_over(const ReceivedHistory& history, std::uint64_t cumulative_ns, std::uint64_t now_ns,
                            std::uint64_t window_ns) {
  const std::uint64_t newest = history.step.load(std::memory_order_acquire);
  if (newest == 0) return 0;  // no history yet
  const std::uint64_t from = now_ns > window_ns ? now_ns - window_ns : 0;
  const std::uint64_t oldest = newest >= kHistorySamples ? newest - kHistorySamples + 1 : 1;
  const auto sample = [&](std::uint64_t step) { return history.total_ns[step % kHistorySamples].load(std::memory_order_relaxed); };
  // The points known: each step's start, the last record, and now. After the last record the total
  // grows only by what `cumulative_ns` has beyond it (nothing, for a tenant that is gone).
  const std::uint64_t updated_at = history.updated_ns.load(std::memory_order_relaxed);
  const std::uint64_t updated_total = history.updated_total_ns.load(std::memory_order_relaxed);
  const auto value_at = [&](std::uint64_t t) -> std::uint64_t {
    std::uint64_t k = t / kHistoryStepNs;
    if (k < oldest) return sample(oldest);  // before the history: as far back as it goes
    std::uint64_t t0, v0, t1, v1;
    if (k < newest) {
      t0 = k * kHistoryStepNs, v0 = sample(k), t1 = t0 + kHistoryStepNs, v1 = sample(k + 1);
    } else if (updated_at > newest * kHistoryStepNs && t < updated_at) {
      t0 = newest * kHistoryStepNs, v0 = sample(newest), t1 = updated_at, v1 = updated_total;
    } else {
      t0 = std::max(updated_at, newest * kHistoryStepNs);
      v0 = std::max(updated_total, sample(newest));
      t1 = now_ns, v1 = std::max(cumulative_ns, v0);
    }
    if (t <= t0 || t1 <= t0 || v1 <= v0) return v0;
    return v0 + (v1 - v0) * (std::min(t, t1) - t0) / (t1 - t0);
  };
  const std::uint64_t at_from = value_at(from);
  return cumulative_ns > at_from ? cumulative_ns - at_from : 0;
}

bool joined_within(const TenantCompute& t, std::uint64_t now_ns, std::uint64_t window_ns) {
  return t.joined_ms != 0 &&
         static_cast<std::uint32_t>(joined_stamp_ms(now_ns) - t.joined_ms) < static_cast<std::uint32_t>(window_ns / 1'000'000);
}

void record_history(ReceivedHistory& history, std::uint64_t cumulative_ns, std::uint64_t now_ns) {
  history.updated_total_ns.store(cumulative_ns, std::memory_order_relaxed);
  history.updated_ns.store(now_ns, std::memory_order_relaxed);
  const std::uint64_t step = now_ns / kHistoryStepNs;
  std::uint64_t seen = history.step.load();
  if (seen >= step) return;
  // The samples first, then the step that makes them visible (a reader never sees a step whose
  // sample is not written). Steps nobody saw (no process ticked) get the same value: nothing was
  // received then.
  const std::uint64_t from = seen == 0 || step - seen > kHistorySamples ? step : seen + 1;
  for (std::uint64_t s = from; s <= step; ++s) history.total_ns[s % kHistorySamples].store(cumulative_ns);
  history.step.compare_exchange_strong(seen, step);
}

namespace {

constexpr std::uint64_t kFullReadNs = 5'000'000;
// A tenant with nothing on the GPU and nothing received over the window is looked at again only
// after this long: most tenant files in a busy coordinator belong to processes that are gone, and
// reading them all every tick would cost more than the scheduling. Short enough that a tenant
// waking up is seen well within the 100 ms the others have to give it the device.
constexpr std::uint64_t kDormantNs = 50'000'000;
constexpr int kAbsent = -2;  // File::entry of a tenant not on this GPU (or unreadable)

void load_entry(const DeviceEntry& e, std::uint64_t now_ns, TenantCompute& t) {
  t.share = percent(e.compute_share.load(std::memory_order_relaxed));
  t.limit = percent(e.compute_limit.load(std::memory_order_relaxed));
  t.priority = priority_from_stored(e.compute_priority.load(std::memory_order_relaxed));
  t.received_ns = e.received_ns.load(std::memory_order_relaxed);
  t.active = e.active_processes.load(std::memory_order_relaxed) != 0 &&
             fresh(e.active_heartbeat_ns.load(std::memory_order_relaxed), now_ns);
  t.joined_ms = e.joined_ms.load(std::memory_order_relaxed);
  t.wanting = e.wanting_processes.load(std::memory_order_relaxed) != 0 &&
              fresh(e.wanting_heartbeat_ns.load(std::memory_order_relaxed), now_ns);
}

}  // namespace

bool ComputeBoard::read_full(File& f, const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns) {
  // The start of a tenant file: its bytes are read, then the header and device entries are loaded
  // from where the layout puts them.
  unsigned char* raw = start_buffer_.data();
  const auto* header = reinterpret_cast<const TenantHeader*>(raw + offsetof(TenantFile, header));
  const auto* devices = reinterpret_cast<const DeviceEntry*>(raw + offsetof(TenantFile, devices));
  unsigned char* history_raw = history_buffer_.data();
  f.entry = kAbsent;  // until found below: not looked at again before the next full read
  if (::pread(f.fd, raw, kReadBytes, 0) != static_cast<ssize_t>(kReadBytes)) return false;
  const TenantHeader& h = *header;
  if (h.magic != kTenantMagic || h.version != kTenantVersion || h.file_size != sizeof(TenantFile)) return false;
  for (int index = 0; index < kMaxDevices; ++index) {
    const DeviceEntry& e = devices[index];
    if (e.state.load(std::memory_order_relaxed) != 2 || std::memcmp(e.uuid, uuid, 16) != 0) continue;
    TenantCompute t;
    t.name = f.name;
    load_entry(e, now_ns, t);
    const off_t at = static_cast<off_t>(offsetof(TenantFile, history) + index * sizeof(ReceivedHistory));
    if (::pread(f.fd, history_raw, sizeof(ReceivedHistory), at) == static_cast<ssize_t>(sizeof(ReceivedHistory)))
      t.window_received_ns = std::min(
          received_over(*reinterpret_cast<const ReceivedHistory*>(history_raw), t.received_ns, now_ns, window_ns),
          window_ns);
    f.entry = index;
    f.received_at_full = t.received_ns;
    f.last = std::move(t);
    return true;
  }
  return false;
}

bool ComputeBoard::read_entry(File& f, const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns) {
  unsigned char* raw = entry_buffer_.data();
  const auto* e = reinterpret_cast<const DeviceEntry*>(raw);
  const off_t at = static_cast<off_t>(offsetof(TenantFile, devices) + f.entry * sizeof(DeviceEntry));
  if (::pread(f.fd, raw, sizeof(DeviceEntry), at) != static_cast<ssize_t>(sizeof(DeviceEntry)) || e->state.load() != 2 ||
      std::memcmp(e->uuid, uuid, 16) != 0)
    return read_full(f, uuid, now_ns, window_ns);
  const std::uint64_t window = f.last.window_received_ns;
  load_entry(*e, now_ns, f.last);
  // What it received since the full read is within the window too (the window's far end moves
  // little in 2 ms).
  const std::uint64_t since = f.last.received_ns > f.received_at_full ? f.last.received_ns - f.received_at_full : 0;
  f.last.window_received_ns = std::min(window + since, window_ns);
  f.received_at_full = f.last.received_ns;
  return true;
}

void ComputeBoard::read(const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns,
                        std::vector<TenantCompute>& out) {
  out.clear();
  rescan(now_ns);
  const bool full = now_ns >= full_read_ns_ + kFullReadNs;
  if (full) full_read_ns_ = now_ns;
  for (File& f : files_) {
    if (now_ns < f.dormant_until_ns || (!full && f.entry == kAbsent)) continue;
    const bool ok = full || f.entry < 0 ? read_full(f, uuid, now_ns, window_ns) : read_entry(f, uuid, now_ns, window_ns);
    if (!ok) continue;
    if (!f.last.active && !f.last.wanting && f.last.window_received_ns == 0 && !joined_within(f.last, now_ns, window_ns)) {
      f.dormant_until_ns = now_ns + kDormantNs;
      continue;  // it asks for nothing: the policy need not know it
    }
    out.push_back(f.last);
  }
}

}  // namespace slice
