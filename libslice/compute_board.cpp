#include "compute_board.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "coordinator_layout.h"
#include "tenant_file.h"

namespace slice {
namespace {

constexpr std::uint64_t kRescanNs = 100'000'000;
// The header and the device entries: all a reader needs, one pread.
constexpr std::size_t kReadBytes = offsetof(TenantFile, slots);

bool fresh(std::uint64_t heartbeat, std::uint64_t now) {
  return heartbeat <= now + kComputeHeartbeatNs && now <= heartbeat + kComputeHeartbeatNs;
}

std::uint32_t percent(std::uint32_t v) { return std::clamp<std::uint32_t>(v, 1, 100); }

}  // namespace

ComputeBoard::ComputeBoard(std::string dir, std::string self) : dir_(std::move(dir)), self_(std::move(self)) {}

ComputeBoard::~ComputeBoard() {
  for (File& f : files_) ::close(f.fd);
}

void ComputeBoard::rescan(std::uint64_t now_ns) {
  if (scanned_ && now_ns < scanned_ns_ + kRescanNs) return;
  scanned_ = true;
  scanned_ns_ = now_ns;
  const std::string folder = dir_ + "/tenants";
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
    if (fd >= 0) kept.push_back({n, fd});
  }
  files_ = std::move(kept);
}

void ComputeBoard::read(const std::uint8_t uuid[16], std::uint64_t now_ns, std::vector<TenantCompute>& out) {
  out.clear();
  rescan(now_ns);
  // A buffer shaped like the start of a tenant file: its bytes are read into it, then loaded.
  alignas(TenantFile) static thread_local unsigned char raw[kReadBytes];
  const auto* file = reinterpret_cast<const TenantFile*>(raw);
  for (const File& f : files_) {
    if (::pread(f.fd, raw, kReadBytes, 0) != static_cast<ssize_t>(kReadBytes)) continue;
    const TenantHeader& h = file->header;
    if (h.magic != kTenantMagic || h.version != kTenantVersion || h.file_size != sizeof(TenantFile)) continue;
    for (const DeviceEntry& e : file->devices) {
      if (e.state.load(std::memory_order_relaxed) != 2 || std::memcmp(e.uuid, uuid, 16) != 0) continue;
      TenantCompute t;
      t.name = f.name;
      t.share = percent(e.compute_share.load(std::memory_order_relaxed));
      t.limit = percent(e.compute_limit.load(std::memory_order_relaxed));
      t.priority = priority_from_stored(e.compute_priority.load(std::memory_order_relaxed));
      t.received_ns = e.received_ns.load(std::memory_order_relaxed);
      t.active = e.active_processes.load(std::memory_order_relaxed) != 0 &&
                 fresh(e.active_heartbeat_ns.load(std::memory_order_relaxed), now_ns);
      t.wanting = e.wanting_processes.load(std::memory_order_relaxed) != 0 &&
                  fresh(e.wanting_heartbeat_ns.load(std::memory_order_relaxed), now_ns);
      out.push_back(std::move(t));
      break;
    }
  }
}

}  // namespace slice
