#include "policy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "coordinator_folder.h"
#include "tenant_file.h"

namespace slice {

namespace {

constexpr std::uint64_t kLookAgainNs = 1'000'000'000;  // a missing policy folder is looked for once a second

std::string generation_path(const std::string& policy_dir) { return policy_dir + "/.generation"; }

// Root-owned and writable by nobody else: the only place a tenant cannot write.
bool trusted(const struct stat& st) { return st.st_uid == 0 && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0; }

// The policy folder itself (never a link) trusted, and every folder above it root's and, where others
// may write, sticky: a user who could rename a parent could put a folder of their own in its place.
bool policy_folder_trusted(const std::string& policy_dir, std::string& message) {
  struct stat st {};
  if (policy_dir.empty() || policy_dir[0] != '/' || lstat(policy_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      !trusted(st)) {
    message = policy_dir + " is not a folder that belongs to root and that nobody else may write";
    return false;
  }
  for (std::size_t end = policy_dir.rfind('/'); end != std::string::npos && end > 0;
       end = policy_dir.rfind('/', end - 1)) {
    const std::string parent = policy_dir.substr(0, end);
    if (stat(parent.c_str(), &st) != 0 || st.st_uid != 0 ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)) {
      message = parent + ", above " + policy_dir + ", is not root's (or is writable by others and not sticky)";
      return false;
    }
  }
  return true;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

}  // namespace

std::optional<MemoryLimit> Policy::memory_for(const std::uint8_t uuid[16]) const {
  auto it = per_gpu.find(uuid_text(uuid));
  return it != per_gpu.end() ? it->second : memory;
}

std::string Policy::to_text(const std::string& tenant) const {
  std::ostringstream o;
  o << "# libslice policy of tenant \"" << tenant << "\" (written by slicectl set)\n";
  if (memory) o << "memory_limit = " << limit_text(memory) << "\n";
  for (auto& [gpu, w] : per_gpu) o << "memory_limit." << gpu << " = " << limit_text(w) << "\n";
  if (compute_share) o << "compute_share = " << *compute_share << "\n";
  if (compute_limit) o << "compute_limit = " << *compute_limit << "\n";
  if (priority) o << "priority = " << to_string(*priority) << "\n";
  if (group) o << "group = " << *group << "\n";
  return o.str();
}

bool parse_policy(const std::string& text, Policy& out, std::string& message) {
  Policy p;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    const std::string l = trim(line.substr(0, line.find('#')));
    if (l.empty()) continue;
    const auto eq = l.find('=');
    if (eq == std::string::npos) {
      message = "line " + std::to_string(n) + ": expected key = value";
      return false;
    }
    const std::string key = trim(l.substr(0, eq)), value = trim(l.substr(eq + 1));
    std::string reason;
    bool ok = true;
    if (key == "memory_limit" || key.rfind("memory_limit.GPU-", 0) == 0) {
      // "none": no cap (for one GPU, an exception to the policy's cap on all the others).
      auto limit = value == "none" ? ParseResult<MemoryLimit>{} : parse_memory_limit(value);
      ok = value == "none" || limit.value.has_value();
      reason = limit.reason;
      (key == "memory_limit" ? p.memory : p.per_gpu[key.substr(std::strlen("memory_limit."))]) = limit.value;
    } else if (key == "compute_share" || key == "compute_limit") {
      auto percent = parse_percent(value);
      ok = percent.value.has_value();
      reason = percent.reason;
      (key == "compute_share" ? p.compute_share : p.compute_limit) = percent.value.value_or(0);
    } else if (key == "priority") {
      auto priority = parse_priority(value);
      ok = priority.value.has_value();
      reason = priority.reason;
      p.priority = priority.value;
    } else if (key == "group") {
      // A number: a name could mean another group on the machine that reads it at boot.
      ok = !value.empty() && value.size() < 10 && value.find_first_not_of("0123456789") == std::string::npos;
      reason = "a group number (gid) is expected";
      if (ok) p.group = static_cast<unsigned>(std::stoul(value));
    } else {
      message = "line " + std::to_string(n) + ": unknown key '" + key + "'";
      return false;
    }
    if (!ok) {
      message = "line " + std::to_string(n) + ": " + key + " = '" + value + "' is not valid: " + reason;
      return false;
    }
  }
  out = p;
  return true;
}

PolicyStatus read_policy(const std::string& policy_dir, const std::string& tenant, Policy& out, std::string& message) {
  // No folder (a caller that has none), or a name that is no tenant's: no policy, and never a path of
  // its own (an empty folder would make "/<tenant>").
  if (policy_dir.empty() || !valid_tenant_name(tenant)) return PolicyStatus::none;
  const std::string path = policy_dir + "/" + tenant;
  struct stat fst {};
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    // Only a policy that is not there means none: one that cannot be read is the administrator's
    // word unread, never "no cap" (a root-only policy, a process out of descriptors).
    const int open_errno = errno;
    if (open_errno == ENOENT || open_errno == ENOTDIR) return PolicyStatus::none;
    if (open_errno == ELOOP) {
      message = path + " is ignored: a policy is never a link";
      return PolicyStatus::untrusted;
    }
    message = path + " cannot be read: " + std::strerror(open_errno);
    return PolicyStatus::invalid;
  }
  if (!policy_folder_trusted(policy_dir, message)) {
    close(fd);
    message = path + " is ignored: " + message;
    return PolicyStatus::untrusted;
  }
  if (fstat(fd, &fst) != 0 || !S_ISREG(fst.st_mode) || !trusted(fst)) {
    close(fd);
    message = path + " is ignored: a policy must belong to root and be writable by nobody else";
    return PolicyStatus::untrusted;
  }
  std::string text;
  char buf[4096];
  ssize_t n = 0;
  while ((n = read(fd, buf, sizeof buf)) > 0 && text.size() < (1u << 20)) text.append(buf, n);
  const int read_errno = errno;
  close(fd);
  if (n < 0) {  // half a policy is no policy to apply
    message = path + " cannot be read: " + std::strerror(read_errno);
    return PolicyStatus::invalid;
  }
  if (!parse_policy(text, out, message)) {
    message = path + ": " + message;
    return PolicyStatus::invalid;
  }
  return PolicyStatus::ok;
}

bool prepare_policy_folder(const std::string& policy_dir, std::string& error) {
  if (policy_dir.empty() || policy_dir[0] != '/') {
    error = "'" + policy_dir + "' is not an absolute path";
    return false;
  }
  for (std::size_t pos = 1; (pos = policy_dir.find('/', pos)) != std::string::npos; ++pos) {
    const std::string parent = policy_dir.substr(0, pos);
    if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      error = "cannot create " + parent + ": " + std::strerror(errno);
      return false;
    }
  }
  if (mkdir(policy_dir.c_str(), 0755) != 0 && errno != EEXIST) {
    error = "cannot create " + policy_dir + ": " + std::strerror(errno);
    return false;
  }
  // A folder someone else made (or a link in its place: root would write through it) would make
  // every policy in it untrusted, and so ignored.
  if (!policy_folder_trusted(policy_dir, error)) {
    error += " (make it root's, mode 0755, and retry)";
    return false;
  }
  int fd = ::open(generation_path(policy_dir).c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0 ||
      (st.st_size < static_cast<off_t>(sizeof(std::uint64_t)) && ftruncate(fd, sizeof(std::uint64_t)) != 0)) {
    error = "cannot create " + generation_path(policy_dir) + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return false;
  }
  close(fd);
  return true;
}

namespace {

// Bumps the counter that running processes watch: they read their policy again at their next
// allocation.
bool bump_generation(const std::string& policy_dir, std::string& error) {
  int fd = ::open(generation_path(policy_dir).c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    error = "cannot update " + generation_path(policy_dir) + ": " + std::strerror(errno);
    return false;
  }
  void* p = mmap(nullptr, sizeof(std::uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    error = "cannot map " + generation_path(policy_dir) + ": " + std::strerror(errno);
    return false;
  }
  static_cast<std::atomic<std::uint64_t>*>(p)->fetch_add(1);
  munmap(p, sizeof(std::uint64_t));
  return true;
}

}  // namespace

bool write_policy(const std::string& policy_dir, const std::string& tenant, const Policy& policy, std::string& error) {
  if (!valid_tenant_name(tenant)) {
    error = "'" + tenant + "' is not a tenant name";
    return false;
  }
  if (!prepare_policy_folder(policy_dir, error)) return false;
  const std::string& folder = policy_dir;
  // Write the new text beside the old and rename it over, so a reader never sees half a policy. The
  // temporary name starts with '.', which no tenant name may: it can be no tenant's policy.
  const std::string path = folder + "/" + tenant, temp = folder + "/.tmp." + tenant;
  unlink(temp.c_str());  // left by a write that died; only root writes in this folder
  int tfd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  const std::string text = policy.to_text(tenant);
  if (tfd < 0 || write(tfd, text.data(), text.size()) != static_cast<ssize_t>(text.size()) || fchmod(tfd, 0644) != 0) {
    error = "cannot write " + temp + ": " + std::strerror(errno);
    if (tfd >= 0) close(tfd);
    return false;
  }
  close(tfd);
  if (rename(temp.c_str(), path.c_str()) != 0) {
    error = "cannot replace " + path + ": " + std::strerror(errno);
    return false;
  }
  // Durable: the policy must outlast a crash of the machine right after `slicectl set` said so.
  if (int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    fsync(dfd);
    close(dfd);
  }
  return bump_generation(policy_dir, error);
}

bool remove_policy(const std::string& policy_dir, const std::string& tenant, std::string& error) {
  if (!valid_tenant_name(tenant)) {
    error = "'" + tenant + "' is not a tenant name";
    return false;
  }
  const std::string path = policy_dir + "/" + tenant;
  if (unlink(path.c_str()) != 0) {
    if (errno == ENOENT) return true;
    error = "cannot remove " + path + ": " + std::strerror(errno);
    return false;
  }
  return bump_generation(policy_dir, error);
}

std::vector<std::string> policy_tenants(const std::string& policy_dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(policy_dir.c_str())) {
    while (const dirent* e = readdir(d))
      if (valid_tenant_name(e->d_name)) names.emplace_back(e->d_name);  // never ".generation" nor ".tmp.*"
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool adopt_tenant_file(const std::string& dir, const std::string& tenant, std::optional<unsigned> group,
                       std::string& error, std::string* notice) {
  // With a group: group read-write, everyone else read (the tools). Without one, only root may
  // write: an existing file's group may be a shared one (users), whose every member would then
  // write this tenant's usage.
  return prepare_coordinator_dir(dir, error) && TenantFileHandle::make_managed(dir, tenant, group, error, notice);
}

bool managed_tenant_file_ok(const std::string& dir, const std::string& policy_dir, const std::string& tenant,
                            std::string& error) {
  if (geteuid() == 0) return true;
  Policy policy;
  std::string message;
  if (read_policy(policy_dir, tenant, policy, message) != PolicyStatus::ok) return true;  // not managed
  const std::string path = dir + "/tenants/" + tenant;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    error = "tenant '" + tenant + "' is managed by an administrator (" + policy_dir + "/" + tenant +
            "), and its live file has not been made since the machine started: run `slicectl prepare` as root "
            "(the libslice-prepare service does at boot)";
    return false;
  }
  if (st.st_uid != 0) {
    error = "tenant '" + tenant + "' is managed by an administrator, but " + path +
            " does not belong to root: run `slicectl prepare` as root";
    return false;
  }
  return true;
}

bool prepare_machine(const std::string& dir, const std::string& policy_dir, std::vector<std::string>& done,
                     std::vector<std::string>& problems, std::string& error) {
  if (!prepare_coordinator_dir(dir, error)) return false;
  if (!coordinator_fit_for_root(dir, error)) {
    struct stat st {};
    if (lstat(dir.c_str(), &st) == 0 && st.st_uid != 0)
      error = dir + " was made by user " + std::to_string(st.st_uid) +
              ", whose process started before this step: stop the processes that use it, remove it, and run "
              "`slicectl prepare` again (at boot, the package's tmpfiles.d entry makes it root's first)";
    return false;
  }
  if (!prepare_policy_folder(policy_dir, error)) return false;
  for (const std::string& tenant : policy_tenants(policy_dir)) {
    Policy policy;
    std::string message;
    if (read_policy(policy_dir, tenant, policy, message) != PolicyStatus::ok) {
      problems.push_back(message.empty() ? policy_dir + "/" + tenant + " cannot be read" : message);
      continue;
    }
    std::string notice;
    if (!adopt_tenant_file(dir, tenant, policy.group, message, &notice)) {
      problems.push_back("tenant '" + tenant + "': " + message);
      continue;
    }
    if (!notice.empty()) problems.push_back(notice);
    done.push_back(
        "tenant '" + tenant + "': live file ready" +
        (policy.group ? ", writable by group " + std::to_string(*policy.group) : std::string(", root's alone")));
  }
  return true;
}

PolicyWatcher::~PolicyWatcher() {
  if (const auto* counter = counter_.load())
    munmap(const_cast<std::atomic<std::uint64_t>*>(counter), sizeof(std::uint64_t));
}

void PolicyWatcher::open(const std::string& policy_dir) { policy_dir_ = policy_dir; }

std::uint64_t PolicyWatcher::look(std::uint64_t now_ns) {
  // The coarse clock: a few ns, on every allocation of a machine without a policy folder.
  const std::uint64_t now = now_ns != 0 ? now_ns : coarse_monotonic_ns();
  if (now < next_look_ns_.load(std::memory_order_relaxed)) return 0;
  std::unique_lock<std::mutex> lock(look_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return 0;  // another thread is looking
  if (const auto* counter = counter_.load(std::memory_order_acquire))
    return counter->load(std::memory_order_acquire) + 1;
  next_look_ns_.store(now + kLookAgainNs, std::memory_order_relaxed);
  // Mapped only when root's and nobody else's to write, in a trusted folder: a counter a tenant
  // planted could be truncated under every process's mapping (SIGBUS), or lie.
  std::string untrusted;
  if (!policy_folder_trusted(policy_dir_, untrusted)) return 0;
  int fd = ::open(generation_path(policy_dir_).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return 0;
  struct stat st {};
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && trusted(st) &&
      st.st_size >= static_cast<off_t>(sizeof(std::uint64_t)))
    p = mmap(nullptr, sizeof(std::uint64_t), PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return 0;
  const auto* counter = static_cast<const std::atomic<std::uint64_t>*>(p);
  counter_.store(counter, std::memory_order_release);
  return counter->load(std::memory_order_acquire) + 1;  // +1: a found counter differs from "none"
}

}  // namespace slice
