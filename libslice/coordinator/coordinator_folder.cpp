#include "coordinator_folder.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace slice {

namespace {

// Root's, and sticky where others may write: nobody else may put, rename or remove entries there
// but in their own name.
bool root_keeps(const struct stat& st) {
  return S_ISDIR(st.st_mode) && st.st_uid == 0 &&
         ((st.st_mode & (S_IWGRP | S_IWOTH)) == 0 || (st.st_mode & S_ISVTX) != 0);
}

}  // namespace

CoordinatorFolder::~CoordinatorFolder() { close_all(); }

CoordinatorFolder::CoordinatorFolder(CoordinatorFolder&& o) noexcept
    : path_(std::move(o.path_)),
      dir_(std::exchange(o.dir_, -1)),
      tenants_(std::exchange(o.tenants_, -1)),
      locks_(std::exchange(o.locks_, -1)) {}

CoordinatorFolder& CoordinatorFolder::operator=(CoordinatorFolder&& o) noexcept {
  if (this != &o) {
    close_all();
    path_ = std::move(o.path_);
    dir_ = std::exchange(o.dir_, -1);
    tenants_ = std::exchange(o.tenants_, -1);
    locks_ = std::exchange(o.locks_, -1);
  }
  return *this;
}

void CoordinatorFolder::close_all() {
  for (int* fd : {&dir_, &tenants_, &locks_})
    if (*fd >= 0) {
      ::close(*fd);
      *fd = -1;
    }
}

bool CoordinatorFolder::open(const std::string& dir, std::string& error) {
  close_all();
  path_ = dir;
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  dir_ = ::open(dir.c_str(), kFlags);
  if (dir_ < 0) {
    error = "cannot open " + dir + ": " + std::strerror(errno);
    return false;
  }
  tenants_ = ::openat(dir_, kTenantsFolder, kFlags);
  if (tenants_ < 0) {
    error = "cannot open " + dir + "/" + kTenantsFolder + ": " + std::strerror(errno);
    return false;
  }
  locks_ = ::openat(dir_, kLocksFolder, kFlags);  // absent in a folder no process has joined yet
  return true;
}

bool CoordinatorFolder::fit_for_root(std::string& error) const {
  const std::pair<int, std::string> folders[] = {
      {dir_, path_}, {tenants_, path_ + "/" + kTenantsFolder}, {locks_, path_ + "/" + kLocksFolder}};
  for (const auto& [fd, name] : folders) {
    struct stat st {};
    if (fd < 0) continue;
    if (fstat(fd, &st) != 0 || !root_keeps(st)) {
      error = name + " is not a folder that belongs to root (sticky where others may write), as root needs: user " +
              std::to_string(st.st_uid) +
              " may replace what root would read or write there. Have root make the coordinator folder "
              "before any other process (the package's tmpfiles.d entry, or `slicectl prepare`)";
      return false;
    }
  }
  return true;
}

bool CoordinatorFolder::fit_for_users(std::string& error) const {
  struct stat top {};
  if (fstat(dir_, &top) != 0) {
    error = "cannot look at " + path_ + ": " + std::strerror(errno);
    return false;
  }
  const std::pair<int, std::string> folders[] = {{tenants_, path_ + "/" + kTenantsFolder},
                                                 {locks_, path_ + "/" + kLocksFolder}};
  for (const auto& [fd, name] : folders) {
    struct stat st {};
    if (fd < 0) continue;
    if (fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode) || (st.st_uid != 0 && st.st_uid != top.st_uid) ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0)) {
      error = name + " belongs to user " + std::to_string(st.st_uid) +
              " (or is not sticky), who may remove or replace anyone's files in it: have root make it "
              "(slicectl prepare)";
      return false;
    }
  }
  return true;
}

int CoordinatorFolder::release_tenants() { return std::exchange(tenants_, -1); }
int CoordinatorFolder::release_locks() { return std::exchange(locks_, -1); }

bool coordinator_fit_for_root(const std::string& dir, std::string& error) {
  CoordinatorFolder folder;
  return folder.open(dir, error) && folder.fit_for_root(error);
}

bool remove_if_same(int folder_fd, const std::string& name, int fd) {
  struct stat named {
  }, open{};
  if (fstatat(folder_fd, name.c_str(), &named, AT_SYMLINK_NOFOLLOW) != 0) return false;
  if (fstat(fd, &open) != 0) return false;
  if (named.st_dev != open.st_dev || named.st_ino != open.st_ino) {
    errno = ESTALE;
    return false;
  }
  // Between the look and the removal only root or the name's owner could replace it (the folders
  // are sticky), and the callers hold the tenant's registration lock, which every writer takes.
  return unlinkat(folder_fd, name.c_str(), 0) == 0;
}

}  // namespace slice
