#include "compute_board.h"

#include "policy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "coordinator_folder.h"
#include "coordinator_layout.h"
#include "tenant_file.h"

namespace slice {
namespace {

// The tenants folder is listed again when it changed, seen by a look (a stat of it, and one of the
// bell's folder: awake_bell.h) every kLookNs, so that a newcomer or a tenant that wakes up is seen
// within that; and every kRescanNs regardless.
constexpr std::uint64_t kRescanNs = 1'000'000'000;
constexpr std::uint64_t kLookNs = 10'000'000;
// The header and the device entries: all a reader needs, one pread.
constexpr std::size_t kReadBytes = offsetof(TenantFile, slots);

bool fresh(std::uint64_t heartbeat, std::uint64_t now) {
  return heartbeat <= now + kComputeHeartbeatNs && now <= heartbeat + kComputeHeartbeatNs;
}

// What a row says of a tenant's device entry `e` at `now_ns` (read, wait_for).
void load_entry(const DeviceEntry& e, std::uint64_t now_ns, TenantCompute& t) {
  t.share = valid_percent(e.compute_share.load(std::memory_order_relaxed));
  t.limit = valid_percent(e.compute_limit.load(std::memory_order_relaxed));
  t.priority = priority_from_stored(e.compute_priority.load(std::memory_order_relaxed));
  t.received_ns = e.received_ns.load(std::memory_order_relaxed);
  t.active = e.active_processes.load(std::memory_order_relaxed) != 0 &&
             fresh(e.active_heartbeat_ns.load(std::memory_order_relaxed), now_ns);
  t.joined_ms = e.joined_ms.load(std::memory_order_relaxed);
  t.wanting = e.wanting_processes.load(std::memory_order_relaxed) != 0 &&
              fresh(e.wanting_heartbeat_ns.load(std::memory_order_relaxed), now_ns);
  t.turn_seq = e.turn_seq.load(std::memory_order_relaxed);
  t.drain_eta_ns = e.drain_eta_ns.load(std::memory_order_relaxed);
}

}  // namespace

TenantTrust trust_of(uid_t file_owner, mode_t file_mode, uid_t reader) {
  if (file_owner == reader) return TenantTrust::believed;
  if (file_owner == 0) return (file_mode & S_IWGRP) != 0 ? TenantTrust::managed_by_a_group : TenantTrust::believed;
  return TenantTrust::stranger;
}

void apply_trust(TenantTrust trust, const PolicyCompute& policy, TenantCompute& t) {
  if (trust == TenantTrust::stranger) {
    t.priority = Priority::low;
    t.active = false;
    t.wanting = false;
  } else if (trust == TenantTrust::managed_by_a_group) {
    const auto rank = [](Priority p) { return p == Priority::high ? 2 : p == Priority::normal ? 1 : 0; };
    const Priority most = policy.priority.value_or(Priority::normal);
    if (rank(t.priority) > rank(most)) t.priority = most;
    if (policy.share) t.share = std::min(t.share, *policy.share);
    if (policy.limit) t.limit = std::min(t.limit, *policy.limit);
  }
}

// The buffers' storage comes from operator new, aligned for any fundamental type: enough for the
// 8-byte atomics loaded from them.
ComputeBoard::ComputeBoard(std::string dir, std::string self, std::string policy_dir)
    : dir_(std::move(dir)),
      self_(std::move(self)),
      policy_dir_(std::move(policy_dir)),
      tenants_folder_(dir_ + "/tenants"),
      awake_folder_(dir_ + "/" + kAwakeFolder) {
  start_buffer_.resize(kReadBytes);
  entry_buffer_.resize(sizeof(DeviceEntry));
}

ComputeBoard::~ComputeBoard() {
  for (File& f : files_) {
    unmap(f);
    ::close(f.fd);
  }
}

void ComputeBoard::unmap(File& f) {
  if (f.page != nullptr) ::munmap(f.page, static_cast<std::size_t>(::sysconf(_SC_PAGESIZE)));
  f.page = nullptr;
  f.page_offset = -1;
}

WaitResult ComputeBoard::wait_for(const TenantCompute& t, std::uint64_t timeout_ns) {
  if (t.board_file < 0 || static_cast<std::size_t>(t.board_file) >= files_.size() || t.entry < 0 ||
      t.entry >= kMaxDevices)
    return WaitResult::failed;
  File& f = files_[static_cast<std::size_t>(t.board_file)];
  if (f.name != t.name) return WaitResult::failed;
  const std::size_t page_size = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t entry_at = offsetof(TenantFile, devices) + static_cast<std::size_t>(t.entry) * sizeof(DeviceEntry);
  const std::size_t at = entry_at + offsetof(DeviceEntry, turn_seq);
  const off_t page_offset = static_cast<off_t>(at & ~(page_size - 1));
  if (f.page == nullptr || f.page_offset != page_offset) {
    unmap(f);
    void* p = ::mmap(nullptr, page_size, PROT_READ, MAP_SHARED, f.fd, page_offset);
    if (p == MAP_FAILED) return WaitResult::failed;
    f.page = p;
    f.page_offset = page_offset;
  }
  // The word first, then the entry: its owner changes the entry, then the word. So either the
  // entry read says the row is out of date, or the word read is from before that change, and the
  // wait below then returns at once (a single read of both could see a new word with old figures).
  std::uint32_t seq = 0;
  if (::pread(f.fd, &seq, sizeof seq, static_cast<off_t>(at)) != static_cast<ssize_t>(sizeof seq))
    return WaitResult::failed;
  unsigned char* raw = entry_buffer_.data();
  const auto* e = reinterpret_cast<const DeviceEntry*>(raw);
  if (::pread(f.fd, raw, sizeof(DeviceEntry), static_cast<off_t>(entry_at)) !=
      static_cast<ssize_t>(sizeof(DeviceEntry)))
    return WaitResult::failed;
  // Compared as a row reads it (heartbeats included): a count whose heartbeat went stale is no
  // change, or every wait on that tenant would end at once.
  TenantCompute now;
  load_entry(*e, monotonic_ns(), now);
  if (now.active != t.active || now.wanting != t.wanting || now.drain_eta_ns != t.drain_eta_ns || seq != t.turn_seq)
    return WaitResult::changed;
  // Never dereferenced here: only the kernel reads it, and a truncated file is EFAULT, not SIGBUS.
  const auto* word =
      reinterpret_cast<const std::atomic<std::uint32_t>*>(static_cast<const char*>(f.page) + (at & (page_size - 1)));
  waiting_on_.store(word);
  const WaitResult r = futex_wait(word, seq, timeout_ns, true);
  waiting_on_.store(nullptr);
  return r;
}

void ComputeBoard::interrupt() {
  if (const auto* word = waiting_on_.load()) futex_wake_all(word, true);
}

void ComputeBoard::look(std::uint64_t now_ns) {
  if (scanned_ && now_ns < looked_ns_ + kLookNs) return;
  looked_ns_ = now_ns;
  const FolderChanges::Seen bell = awake_folder_.look();
  // Whether the folder is to be trusted is looked at with the listing's rhythm (two more calls).
  if (!scanned_ || now_ns >= trust_checked_ns_ + kRescanNs) {
    trust_checked_ns_ = now_ns;
    bell_trusted_ = bell_trusted(dir_);
  }
  bell_works_ = bell != FolderChanges::Seen::missing && bell_trusted_;
  rung_ |= bell == FolderChanges::Seen::changed;
  const bool listing_changed = tenants_folder_.look() == FolderChanges::Seen::changed;
  if (!scanned_ || listing_changed || now_ns >= scanned_ns_ + kRescanNs) rescan(now_ns);
}

void ComputeBoard::rescan(std::uint64_t now_ns) {
  scanned_ = true;
  scanned_ns_ = now_ns;
  // The folder opened once, and listed and read through that descriptor: a tenants/ swapped for a
  // link meanwhile sends no read elsewhere.
  CoordinatorFolder folder;
  std::string unusable;
  if (!folder.open(dir_, unusable)) return;
  const int list_fd = ::dup(folder.tenants());
  DIR* d = list_fd >= 0 ? ::fdopendir(list_fd) : nullptr;
  if (d == nullptr) {
    if (list_fd >= 0) ::close(list_fd);
    return;
  }
  std::vector<std::pair<std::string, ino_t>> names;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.' && e->d_name != self_ && valid_tenant_name(e->d_name))
      names.emplace_back(e->d_name, e->d_ino);
  ::closedir(d);
  // Keep what is still there (the same file, not one made anew under its name), open what is new,
  // close what is gone. Sorted, so that a listing of hundreds costs no more than a sort.
  std::sort(names.begin(), names.end());
  std::vector<File> kept;
  for (File& f : files_) {
    if (std::binary_search(names.begin(), names.end(), std::make_pair(f.name, f.inode))) {
      kept.push_back(std::move(f));
    } else {
      unmap(f);
      ::close(f.fd);
    }
  }
  std::vector<std::string> kept_names;
  kept_names.reserve(kept.size());
  for (const File& f : kept) kept_names.push_back(f.name);
  std::sort(kept_names.begin(), kept_names.end());
  for (const auto& [n, inode] : names) {
    if (std::binary_search(kept_names.begin(), kept_names.end(), n)) continue;
    const int fd = ::openat(folder.tenants(), n.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) continue;
    struct stat opened {};
    if (::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode)) {
      ::close(fd);
      continue;
    }
    File f;
    f.name = n;
    f.fd = fd;
    f.inode = opened.st_ino;
    kept.push_back(std::move(f));
  }
  files_ = std::move(kept);
  // Whose each file is, looked at again (an adoption gives a file its group where it is), and what
  // the administrator sets for a group's tenant: its policy, read at most once a second (anyone may
  // change the listing a hundred times a second).
  const bool read_policies = now_ns >= policies_read_ns_ + kRescanNs;
  if (read_policies) policies_read_ns_ = now_ns;
  for (File& f : files_) {
    struct stat st {};
    f.trust = ::fstat(f.fd, &st) == 0 ? trust_of(st.st_uid, st.st_mode, geteuid()) : TenantTrust::stranger;
    if (f.trust != TenantTrust::managed_by_a_group) {
      f.policy = {};
    } else if (read_policies) {
      Policy policy;
      std::string message;
      const bool have = !policy_dir_.empty() && read_policy(policy_dir_, f.name, policy, message) == PolicyStatus::ok;
      f.policy = have ? PolicyCompute{policy.priority, policy.compute_share, policy.compute_limit} : PolicyCompute{};
    }
  }
  // Which files are read at each look, and which rest (longest resting first), as they were.
  working_.clear();
  resting_.clear();
  for (std::size_t i = 0; i < files_.size(); ++i) {
    if (files_[i].dormant_until_ns == 0) {
      working_.push_back(i);
    } else {
      resting_.push_back(i);
    }
  }
  std::sort(resting_.begin(), resting_.end(),
            [&](std::size_t a, std::size_t b) { return files_[a].dormant_until_ns < files_[b].dormant_until_ns; });
}

std::uint64_t received_over(const ReceivedHistory& history, std::uint64_t cumulative_ns, std::uint64_t now_ns,
                            std::uint64_t window_ns) {
  const std::uint64_t newest = history.step.load(std::memory_order_acquire);
  if (newest == 0) return 0;  // no history yet
  const std::uint64_t from = now_ns > window_ns ? now_ns - window_ns : 0;
  const std::uint64_t oldest = newest >= kHistorySamples ? newest - kHistorySamples + 1 : 1;
  const auto sample = [&](std::uint64_t step) {
    return history.total_ns[step % kHistorySamples].load(std::memory_order_relaxed);
  };
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
  return t.joined_ms != 0 && static_cast<std::uint32_t>(joined_stamp_ms(now_ns) - t.joined_ms) <
                                 static_cast<std::uint32_t>(window_ns / 1'000'000);
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

// A tenant's history is read again this often; in between, its device entry alone (one pread), with
// the history kept from the last full read: the window's far end lies in samples older than that
// read, which do not change, and its near end is the entry's cumulative figure, read each time.
constexpr std::uint64_t kFullReadNs = 100'000'000;
// A tenant with nothing on the GPU and nothing received over the window rests: most tenant files in
// a busy coordinator belong to processes that rest or are gone, and reading them all at every look
// would make a look cost more with every tenant. It is read again when a tenant rings the bell
// (awake_bell.h: it starts work after resting, and is seen within a look, well within the 100 ms
// the others have to give it the device), and after kDormantNs regardless; where the coordinator
// has no bell's folder, after kDormantWithoutBellNs.
constexpr std::uint64_t kDormantNs = 1'000'000'000;
constexpr std::uint64_t kDormantWithoutBellNs = 50'000'000;
// Resting tenants whose rest is over are read again at most this many a look (all of them when the
// bell rang): with hundreds, the last is read a few hundred looks later, not all at one look.
constexpr std::size_t kRestingRereadsPerLook = 2;
constexpr int kAbsent = -2;  // File::entry of a tenant not on this GPU (or unreadable)

}  // namespace

bool ComputeBoard::read_full(File& f, const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns) {
  // The start of a tenant file: its bytes are read, then the header and device entries are loaded
  // from where the layout puts them.
  unsigned char* raw = start_buffer_.data();
  const auto* header = reinterpret_cast<const TenantHeader*>(raw + offsetof(TenantFile, header));
  const auto* devices = reinterpret_cast<const DeviceEntry*>(raw + offsetof(TenantFile, devices));
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
    apply_trust(f.trust, f.policy, t);
    const off_t at = static_cast<off_t>(offsetof(TenantFile, history) + index * sizeof(ReceivedHistory));
    f.has_history =
        ::pread(f.fd, f.history.data(), sizeof(ReceivedHistory), at) == static_cast<ssize_t>(sizeof(ReceivedHistory));
    if (f.has_history) {
      t.window_received_ns = std::min(
          received_over(*reinterpret_cast<const ReceivedHistory*>(f.history.data()), t.received_ns, now_ns, window_ns),
          window_ns);
    }
    f.entry = index;
    f.last = std::move(t);
    return true;
  }
  return false;
}

bool ComputeBoard::read_entry(File& f, const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns) {
  unsigned char* raw = entry_buffer_.data();
  const auto* e = reinterpret_cast<const DeviceEntry*>(raw);
  const off_t at = static_cast<off_t>(offsetof(TenantFile, devices) + f.entry * sizeof(DeviceEntry));
  if (::pread(f.fd, raw, sizeof(DeviceEntry), at) != static_cast<ssize_t>(sizeof(DeviceEntry)) ||
      e->state.load() != 2 || std::memcmp(e->uuid, uuid, 16) != 0)
    return read_full(f, uuid, now_ns, window_ns);
  load_entry(*e, now_ns, f.last);
  apply_trust(f.trust, f.policy, f.last);
  // The window over the history kept from the full read, up to the entry's figure now.
  f.last.window_received_ns = f.has_history
                                  ? std::min(received_over(*reinterpret_cast<const ReceivedHistory*>(f.history.data()),
                                                           f.last.received_ns, now_ns, window_ns),
                                             window_ns)
                                  : 0;
  return true;
}

void ComputeBoard::read(const std::uint8_t uuid[16], std::uint64_t now_ns, std::uint64_t window_ns,
                        std::vector<TenantCompute>& out) {
  out.clear();
  look(now_ns);
  // Someone woke up: every resting tenant is read at this look. Otherwise a few whose rest is over
  // are (the longest resting first), so that a look's cost does not grow with the number of tenants.
  const bool all = rung_;
  rung_ = false;
  for (std::size_t n = 0; !resting_.empty(); ++n) {
    File& f = files_[resting_.front()];
    if (!all && (n == kRestingRereadsPerLook || now_ns < f.dormant_until_ns)) break;
    f.dormant_until_ns = 0;
    working_.push_back(resting_.front());
    resting_.pop_front();
  }
  const bool full = now_ns >= full_read_ns_ + kFullReadNs;
  if (full) full_read_ns_ = now_ns;
  std::size_t kept = 0;
  for (const std::size_t i : working_) {
    File& f = files_[i];
    working_[kept++] = i;
    if (!full && f.entry == kAbsent) continue;
    const bool ok =
        full || f.entry < 0 ? read_full(f, uuid, now_ns, window_ns) : read_entry(f, uuid, now_ns, window_ns);
    if (!ok) continue;
    if (!f.last.active && !f.last.wanting && f.last.window_received_ns == 0 &&
        !joined_within(f.last, now_ns, window_ns)) {
      f.dormant_until_ns = now_ns + (bell_works_ ? kDormantNs : kDormantWithoutBellNs);
      resting_.push_back(i);
      --kept;
      continue;  // it asks for nothing: the policy need not know it
    }
    f.last.board_file = static_cast<int>(i);
    f.last.entry = f.entry;
    out.push_back(f.last);
  }
  working_.resize(kept);
}

}  // namespace slice
