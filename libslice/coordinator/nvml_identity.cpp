#include "nvml_identity.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>

namespace slice {
namespace {

// The host's PID namespace: its inode number is fixed (PROC_PID_INIT_INO).
constexpr const char* kInitPidNamespace = "pid:[4026531836]";

bool in_init_namespace(const char* ns_link) {
  char target[64] = "";
  const ssize_t n = readlink(ns_link, target, sizeof target - 1);
  return n > 0 && std::strcmp(target, kInitPidNamespace) == 0;
}

std::optional<std::uint32_t> first_nspid() {
  const int fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char buffer[4096];
  const ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  buffer[n] = '\0';
  const char* at = std::strstr(buffer, "\nNSpid:");
  unsigned long pid = 0;
  if (at == nullptr || std::sscanf(at + 7, "%lu", &pid) != 1 || pid == 0) return std::nullopt;
  return static_cast<std::uint32_t>(pid);
}

// The PIDs whose memory grew from `before` to `after` (new ones included).
std::vector<std::uint32_t> grew(const std::vector<NvmlProcessEntry>& before,
                                const std::vector<NvmlProcessEntry>& after) {
  std::vector<std::uint32_t> out;
  for (const NvmlProcessEntry& a : after) {
    const auto b =
        std::find_if(before.begin(), before.end(), [&](const NvmlProcessEntry& e) { return e.pid == a.pid; });
    if (a.bytes > (b != before.end() ? b->bytes : 0)) out.push_back(a.pid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::optional<std::uint32_t> nvml_pid_from_kernel() {
  if (in_init_namespace("/proc/self/ns/pid")) return static_cast<std::uint32_t>(getpid());
  if (in_init_namespace("/proc/1/ns/pid")) return first_nspid();  // the host's /proc
  return std::nullopt;
}

std::optional<std::uint32_t> NvmlIdentity::known_locked() {
  if (!pid_ && !asked_kernel_) {  // the kernel first, once
    asked_kernel_ = true;
    pid_ = kernel_();
  }
  return pid_;
}

std::optional<std::uint32_t> NvmlIdentity::pid() {
  std::lock_guard<std::mutex> lock(mu_);
  return known_locked();
}

void NvmlIdentity::observe_context(const std::vector<NvmlProcessEntry>& before,
                                   const std::vector<NvmlProcessEntry>& after) {
  const std::vector<std::uint32_t> now = grew(before, after);
  std::lock_guard<std::mutex> lock(mu_);
  if (known_locked() || now.empty()) return;  // known, or nothing to learn from
  std::vector<std::uint32_t> both;
  std::set_intersection(candidates_.begin(), candidates_.end(), now.begin(), now.end(), std::back_inserter(both));
  // The first observation, or one that contradicts the others (a process that left, or this one's
  // entry that did not grow while a neighbour's did): start anew. After a contradiction one of the
  // two observations was wrong, and nothing tells which: a single candidate then counts only once
  // another observation keeps it.
  if (!candidates_.empty() && both.empty()) {
    candidates_ = now;
    return;
  }
  candidates_ = candidates_.empty() ? now : both;
  if (candidates_.size() == 1) pid_ = candidates_[0];
}

void NvmlIdentity::reset() {
  new (&mu_) std::mutex();
  asked_kernel_ = false;
  pid_.reset();
  candidates_.clear();
}

}  // namespace slice
