#include "lineage.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "tenant_file.h"  // valid_tenant_name

namespace slice {
namespace {

constexpr int kMaxAncestors = 64;

std::string read_small_file(const std::string& path) {
  std::string text;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return text;
  char buffer[4096];
  ssize_t n;
  while (text.size() < 65536 && (n = ::read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, n);
  ::close(fd);
  return text;
}

std::string marker_name(const ProcessIdentity& p) {
  return std::to_string(p.proc_instance) + "." + std::to_string(p.pid) + "." + std::to_string(p.start_ticks);
}

// Which /proc numbers the PIDs this process reads: the device of its file system. A PID namespace
// made without a /proc of its own (`unshare --pid --fork`) reads the host's, and its processes are
// numbered there as the host's are; a container with a /proc of its own has another. (The PID
// namespace of /proc's first process would say the same, but reading its /proc/1/ns takes the right
// to trace it, which even root may lack; a process's own namespace is the wrong one in the first case.)
std::uint64_t proc_instance() {
  struct stat st {};
  return stat("/proc/self", &st) == 0 ? static_cast<std::uint64_t>(st.st_dev) : 0;
}

// A process as `/proc/<which>` describes it ("self", or a PID), its PID as that /proc numbers it.
std::optional<ProcessIdentity> identity_at(const std::string& which, std::uint64_t instance) {
  if (instance == 0) return std::nullopt;
  const std::string base = "/proc/" + which;
  const std::string stat = read_small_file(base + "/stat");
  // pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime
  // cutime cstime priority nice num_threads itrealvalue starttime: the name may hold anything, so
  // the fields are counted from its closing parenthesis.
  const auto close = stat.rfind(')');
  long long pid = 0;
  if (close == std::string::npos || std::sscanf(stat.c_str(), "%lld", &pid) != 1 || pid <= 0) return std::nullopt;
  ProcessIdentity id;
  id.proc_instance = instance;
  id.pid = static_cast<pid_t>(pid);
  char state = 0;
  long long ppid = 0, pgrp = 0, session = 0;
  unsigned long long start = 0;
  if (std::sscanf(stat.c_str() + close + 1,
                  " %c %lld %lld %lld %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &state, &ppid,
                  &pgrp, &session, &start) != 5)
    return std::nullopt;
  id.parent = static_cast<pid_t>(ppid);
  id.group = static_cast<pid_t>(pgrp);
  id.session = static_cast<pid_t>(session);
  id.start_ticks = start;
  const std::string status = read_small_file(base + "/status");
  const auto uid = status.find("\nUid:");
  unsigned long real = 0, effective = 0;
  if (uid == std::string::npos || std::sscanf(status.c_str() + uid + 5, "%lu %lu", &real, &effective) != 2)
    return std::nullopt;
  id.uid = static_cast<uid_t>(effective);
  return id;
}

// Whether the process a marker names is gone: its PID is not in /proc, or is another process's now.
// Anything else (a /proc that hides other users' processes answers EACCES or nothing) is no proof.
bool process_gone(long long pid, unsigned long long start_ticks) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT || errno == ESRCH;
  char buffer[1024];
  const ssize_t n = ::read(fd, buffer, sizeof buffer - 1);
  ::close(fd);
  if (n <= 0) return false;
  buffer[n] = '\0';
  const char* close = std::strrchr(buffer, ')');
  unsigned long long start = 0;
  if (close == nullptr ||
      std::sscanf(close + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                  &start) != 1)
    return false;
  return start != start_ticks;
}

// The members folder, opened without following a link, if it can be trusted; -1 otherwise. A
// member's marker is believed because nobody but its own user can make or change it: the folder
// must be root's or the coordinator folder's owner's (whoever owns a folder may remove anything in
// it), and sticky where others may write (or anyone could replace anyone's marker).
int open_members(const std::string& dir) {
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return -1;
  const int fd = ::openat(dir_fd, kMembersFolder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat top {
  }, members{};
  const bool trusted = fd >= 0 && fstat(dir_fd, &top) == 0 && fstat(fd, &members) == 0 &&
                       (members.st_uid == 0 || members.st_uid == top.st_uid) &&
                       ((members.st_mode & (S_IWGRP | S_IWOTH)) == 0 || (members.st_mode & S_ISVTX) != 0);
  ::close(dir_fd);
  if (trusted) return fd;
  if (fd >= 0) {
    ::close(fd);
    errno = EPERM;
  }
  return -1;
}

// The tenant a live member's marker names, if it has one that its own user (or root) made. The link
// is opened once and everything is read from that one file: a marker replaced between a check and
// the read cannot name another tenant.
std::optional<std::string> tenant_of(int members_fd, const ProcessIdentity& member) {
  const std::string name = marker_name(member);
  const int fd = openat(members_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  struct stat st {};
  char target[256];
  ssize_t n = -1;
  if (fstat(fd, &st) == 0 && S_ISLNK(st.st_mode) && (st.st_uid == member.uid || st.st_uid == 0))
    n = readlinkat(fd, "", target, sizeof target - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  const std::string tenant(target, static_cast<std::size_t>(n));
  if (!valid_tenant_name(tenant)) return std::nullopt;
  return tenant;
}

// This process's marker, kept from its mark to its unmark (the same process). No std::string: nothing
// of libslice's runs at load (its constructor would).
char g_marker[96] = "";
pid_t g_marker_pid = 0;

}  // namespace

std::optional<ProcessIdentity> identity_of(pid_t pid) { return identity_at(std::to_string(pid), proc_instance()); }

std::optional<ProcessIdentity> own_identity() { return identity_at("self", proc_instance()); }

std::vector<ProcessIdentity> lineage(const ProcessIdentity& self) {
  std::vector<ProcessIdentity> out;
  const auto listed = [&](pid_t pid) {
    for (const ProcessIdentity& p : out)
      if (p.pid == pid) return true;
    return pid == self.pid;
  };
  const auto describe = [&](pid_t pid) { return identity_at(std::to_string(pid), self.proc_instance); };
  for (pid_t p = self.parent; p > 0 && static_cast<int>(out.size()) < kMaxAncestors;) {
    const std::optional<ProcessIdentity> ancestor = describe(p);
    if (!ancestor) break;
    out.push_back(*ancestor);
    p = ancestor->parent;
  }
  for (const pid_t leader : {self.group, self.session}) {
    if (leader <= 0 || listed(leader)) continue;
    if (const std::optional<ProcessIdentity> l = describe(leader)) out.push_back(*l);
  }
  return out;
}

std::optional<std::string> inherited_tenant(const std::string& dir, const ProcessIdentity& self) {
  const int members_fd = open_members(dir);
  if (members_fd < 0) return std::nullopt;
  std::optional<std::string> tenant;
  for (const ProcessIdentity& p : lineage(self))
    if ((tenant = tenant_of(members_fd, p))) break;
  ::close(members_fd);
  return tenant;
}

std::optional<std::string> inherited_tenant(const std::string& dir) {
  const std::optional<ProcessIdentity> self = own_identity();
  return self ? inherited_tenant(dir, *self) : std::nullopt;
}

bool mark_member(const std::string& dir, const std::string& tenant, std::string& error) {
  const std::optional<ProcessIdentity> self = own_identity();
  if (!self) {
    error = "cannot read this process's identity in /proc";
    return false;
  }
  const int members_fd = open_members(dir);
  if (members_fd < 0) {
    error = "cannot use " + dir + "/" + kMembersFolder + ": " + std::strerror(errno) +
            " (it must be root's or the coordinator folder's owner's, and sticky where others may write)";
    return false;
  }
  const std::string name = marker_name(*self);
  bool made = symlinkat(tenant.c_str(), members_fd, name.c_str()) == 0;
  if (!made && errno == EEXIST) {  // this very process's, from a session before (the name is ours)
    unlinkat(members_fd, name.c_str(), 0);
    made = symlinkat(tenant.c_str(), members_fd, name.c_str()) == 0;
  }
  if (!made) error = "cannot write in " + dir + "/" + kMembersFolder + ": " + std::strerror(errno);
  ::close(members_fd);
  if (made) {
    std::snprintf(g_marker, sizeof g_marker, "%s", name.c_str());
    g_marker_pid = getpid();
  }
  return made;
}

void unmark_member(const std::string& dir) {
  if (g_marker[0] == '\0' || g_marker_pid != getpid()) return;  // none, or the parent's (a forked child)
  const int members_fd = open_members(dir);
  if (members_fd < 0) return;
  unlinkat(members_fd, g_marker, 0);
  ::close(members_fd);
  g_marker[0] = '\0';
}

int remove_stale_markers(const std::string& dir) {
  const std::uint64_t instance = proc_instance();
  const int members_fd = open_members(dir);
  if (instance == 0 || members_fd < 0) {
    if (members_fd >= 0) ::close(members_fd);
    return 0;
  }
  int removed = 0;
  const int list_fd = dup(members_fd);
  if (DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr) {
    while (dirent* e = readdir(d)) {
      unsigned long long ns = 0, start = 0;
      long long pid = 0;
      if (std::sscanf(e->d_name, "%llu.%lld.%llu", &ns, &pid, &start) != 3 || ns != instance) continue;
      if (!process_gone(pid, start)) continue;
      if (unlinkat(members_fd, e->d_name, 0) == 0) ++removed;
    }
    closedir(d);
  } else if (list_fd >= 0) {
    ::close(list_fd);
  }
  ::close(members_fd);
  return removed;
}

std::string new_tenant_name(const std::string& program) {
  std::string base;
  for (const char c : program) {
    if (c == '\0' || c == '\n' || base.size() >= 24) break;
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
    base += ok ? c : '_';
  }
  while (!base.empty() && (base[0] == '.' || base[0] == '-')) base.erase(0, 1);
  if (base.empty()) base = "process";
  std::uint32_t random = 0;
  if (getrandom(&random, sizeof random, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof random))
    random = static_cast<std::uint32_t>(reinterpret_cast<std::uintptr_t>(&random) ^ ::getpid());
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "-%d-%06x", static_cast<int>(::getpid()), random & 0xFFFFFFu);
  return base + suffix;
}

}  // namespace slice
