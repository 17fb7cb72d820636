// One tenant's shared file, mapped: opening or creating it, checking that it is what it claims to
// be, and the kernel-held locks that say which of its process slots are alive.
#pragma once

#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <string>

#include "coordinator_layout.h"

namespace slice {

// Creates SLICE_COORDINATOR_DIR and its tenants/ and locks/ folders when missing (mode 1777, like
// /tmp: every user may register a tenant, none may remove another's), and checks they are usable.
// The awake/ and members/ folders are made too where they can be: without them, only the bell and
// the lineage are missing.
bool prepare_coordinator_dir(const std::string& dir, std::string& error);

bool valid_tenant_name(const std::string& name);

class TenantFileHandle {
 public:
  // snapshot: a private copy, for tools that read other users' tenants: a tenant that truncates its
  // own file while it is read cannot crash them (a mapping would fault). read_only: a live mapping.
  enum class Mode { snapshot, read_only, read_write, create };
  // Opens <dir>/tenants/<name>. With Mode::create, a missing file is created and a file that is not a
  // valid tenant file, but that no live process uses, is rebuilt. Never trusts what it reads.
  static std::unique_ptr<TenantFileHandle> open(const std::string& dir, const std::string& name, Mode mode,
                                                std::string& error);
  ~TenantFileHandle();
  TenantFileHandle(const TenantFileHandle&) = delete;
  TenantFileHandle& operator=(const TenantFileHandle&) = delete;

  TenantFile& file() { return *file_; }
  const TenantFile& file() const { return *file_; }
  bool writable() const { return writable_; }
  const std::string& name() const { return name_; }

  // Slot ownership: a write lock on the slot's byte, held by the owner for its whole life.
  bool try_lock_slot(int slot) const;
  void unlock_slot(int slot) const;
  // True while some other open file description (another process) holds the slot's lock.
  bool slot_held_by_other(int slot) const;
  // The short lock for structural changes (creation, registration): polled with a deadline.
  bool lock_init(std::uint64_t timeout_ns) const;
  void unlock_init() const;
  // True if any process slot of the file is held by a live process.
  bool any_live_slot() const;
  // False once the file was removed (`slicectl rm`) since it was opened.
  bool linked() const;
  // Removes the file (and its lock file) from the folders this handle opened it in (Mode::read_write),
  // only while the name is still this file's. The caller holds the registration lock.
  bool remove(std::string& error) const;
  // Makes <dir>/tenants/<name> a tenant that root manages: root's, writable by `group` where given
  // (0664; else 0644), its lock file alike (0660; else 0600). A file that is not already so is made
  // anew and renamed into place, never changed where it is: a former writer keeps a descriptor on
  // the old file, not on this one (it could truncate it under the tenant's mappings).
  // Processes that still run in an old file keep counting there: `notice` names them (as root only).
  static bool make_managed(const std::string& dir, const std::string& name, std::optional<unsigned> group,
                           std::string& error, std::string* notice = nullptr);
  // In a child made by fork: lets go of the parent's file (and so of its slot's lock).
  void forget_after_fork();

 private:
  // One attempt of open(); `removed` when the file was unlinked (slicectl rm) between the open and
  // the lock, so that open() tries again with the name's new file.
  static std::unique_ptr<TenantFileHandle> open_once(const std::string& dir, const std::string& name, Mode mode,
                                                     std::string& error, bool& removed);
  TenantFileHandle() = default;
  TenantFile* file_ = nullptr;
  bool copied_ = false;  // file_ is a heap copy (Mode::snapshot), not a mapping
  int fd_ = -1;
  int lock_fd_ = -1;     // locks/<name>: the slots' and the registration's locks; -1 where not ours to open
  int tenants_fd_ = -1;  // Mode::read_write: the folders it was opened in, for remove()
  int locks_fd_ = -1;
  bool writable_ = false;
  std::string name_;
};

// Removes lock files under <dir>/locks that are not their tenant's (another user's, planted before
// it), or belong to no tenant and hold no lock, and an adoption's temporary files left by a crash
// (`slicectl gc`). How many.
int remove_stray_lock_files(const std::string& dir);

std::uint64_t monotonic_ns();
// CLOCK_MONOTONIC_COARSE: the monotonic time of the kernel's last tick, read from the vDSO without
// reading a timer (a few ns, against some 20 for monotonic_ns()). Never ahead of monotonic_ns(), and
// behind it by less than one tick, coarse_clock_tick_ns(): 1 to 10 ms depending on the kernel's HZ
// (4 ms on most distributions). Where the kernel lacks it, monotonic_ns().
std::uint64_t coarse_monotonic_ns();
std::uint64_t coarse_clock_tick_ns();

}  // namespace slice
