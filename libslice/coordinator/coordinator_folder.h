// The coordinator folder opened once, as descriptors: every later open, rename and removal in it
// happens in the folders that were opened and checked, whatever another user renames or links in
// their place meanwhile (a tenants/ swapped for a link to /etc while root's `slicectl rm` waited
// made root remove /etc/passwd: issue 29).
#pragma once

#include <string>

namespace slice {

inline constexpr const char* kTenantsFolder = "tenants";
// One companion file per tenant, locks/<tenant>: the kernel-held locks that say which of its
// process slots are alive. Apart from the tenant file, which every user may read (and so lock for
// reading: a read lock on a slot's byte kept a tenant's processes out), it is open only to the
// tenant's writers (mode 0600, or 0660 for a managed tenant's group).
inline constexpr const char* kLocksFolder = "locks";

class CoordinatorFolder {
 public:
  CoordinatorFolder() = default;
  ~CoordinatorFolder();
  CoordinatorFolder(CoordinatorFolder&& o) noexcept;
  CoordinatorFolder& operator=(CoordinatorFolder&& o) noexcept;
  CoordinatorFolder(const CoordinatorFolder&) = delete;
  CoordinatorFolder& operator=(const CoordinatorFolder&) = delete;

  // Opens `dir` and its tenants/ (and locks/ where it exists), following no link at any of them.
  bool open(const std::string& dir, std::string& error);
  // Whether root may use it: the folder, tenants/ and locks/ belong to root and, where others may
  // write, are sticky. Anything else lets a user replace, move or link what root reads and writes.
  bool fit_for_root(std::string& error) const;
  // Whether a user may use it: tenants/ and locks/ belong to root or to the folder's owner and, where
  // others may write, are sticky. Another user's would let them remove or replace anyone's files.
  bool fit_for_users(std::string& error) const;

  int dir() const { return dir_; }
  int tenants() const { return tenants_; }
  int locks() const { return locks_; }  // -1 where there is none
  const std::string& path() const { return path_; }
  // Hands the descriptors to the caller (who closes them).
  int release_tenants();
  int release_locks();

 private:
  void close_all();
  std::string path_;
  int dir_ = -1, tenants_ = -1, locks_ = -1;
};

// For the tools that work by path (policy.cpp): CoordinatorFolder::open, then fit_for_root.
bool coordinator_fit_for_root(const std::string& dir, std::string& error);

// Removes `name` from the folder `folder_fd` only while it is still the file `fd` is open on: a name
// replaced meanwhile (by a link, another file) is left alone. False (errno set) if not removed.
bool remove_if_same(int folder_fd, const std::string& name, int fd);

}  // namespace slice
