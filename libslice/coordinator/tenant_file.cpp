#include "tenant_file.h"

#include "lineage.h"

#include "awake_bell.h"
#include "coordinator_folder.h"
#include "policy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <vector>

namespace slice {

namespace {

bool ofd_lock(int fd, std::int64_t start, short type) {
  struct flock fl {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = 1;
  return fcntl(fd, F_OFD_SETLK, &fl) == 0;
}

// Whether another open file description holds a lock there. Without the lock file (another user's
// tenant, whose lock file only its writers may open) nobody can tell: never treat a process as dead.
bool locked_by_other(int fd, std::int64_t start, std::int64_t len) {
  if (fd < 0) return true;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  fl.l_start = start;
  fl.l_len = len;
  if (fcntl(fd, F_OFD_GETLK, &fl) != 0) return true;  // cannot tell: never treat a process as dead
  return fl.l_type != F_UNLCK;
}

bool make_dir(const std::string& path, mode_t mode, std::string& error) {
  const bool created = mkdir(path.c_str(), mode) == 0;
  if (!created && errno != EEXIST) {
    error = "cannot create " + path + ": " + std::strerror(errno);
    return false;
  }
  // Opened without following links, then changed through the handle: a link swapped in by
  // someone else must never turn root's chmod (or anything after it) elsewhere.
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == EACCES) {
    error = "cannot enter " + path +
            ": permission denied (the package opens the coordinator folder to root and the members of group "
            "'libslice' only: have the administrator add this user to it, with usermod -aG libslice USER)";
    return false;
  }
  if (fd < 0) {
    error = path + " exists and is not a directory (" + std::strerror(errno) + ")";
    return false;
  }
  struct stat st {};
  // mkdir applies the umask; the sticky, shared mode is the point. Only the folder's owner may
  // change it, and only a folder we just made needs it.
  if (created && fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 07777) != mode) fchmod(fd, mode);
  close(fd);
  return true;
}

bool header_valid(const TenantHeader& h, const std::string& name) {
  if (h.magic != kTenantMagic || h.version != kTenantVersion || h.file_size != sizeof(TenantFile)) return false;
  if (std::memchr(h.name, '\0', sizeof h.name) == nullptr) return false;
  return name == h.name;
}

void initialize(TenantFile* f, const std::string& name) {
  std::memset(static_cast<void*>(f), 0, sizeof(TenantFile));
  f->header.magic = kTenantMagic;
  f->header.version = kTenantVersion;
  f->header.file_size = sizeof(TenantFile);
  std::memcpy(f->header.name, name.c_str(), name.size());
  f->header.owner_uid = static_cast<std::uint32_t>(geteuid());
  for (std::uint64_t& m : f->header.registered.memory_bytes) m = kNoLimit;  // zero would be a cap of 0
}

// Whether every memory meter in the file still reads as in `copy` (its counters, not the time of
// its next sample).
bool meters_unchanged(int fd, const TenantFile& copy) {
  for (int d = 0; d < kMaxDevices; ++d) {
    const MemoryMeter& was = copy.usage[d].memory;
    std::uint64_t now[2];
    const off_t at = static_cast<off_t>(offsetof(TenantFile, usage) + d * sizeof(UsageRecord) +
                                        offsetof(UsageRecord, memory) + offsetof(MemoryMeter, units));
    static_assert(offsetof(MemoryMeter, fraction) == offsetof(MemoryMeter, units) + sizeof(std::uint64_t));
    if (pread(fd, now, sizeof now, at) != static_cast<ssize_t>(sizeof now)) return false;
    if (now[0] != was.units.load() || now[1] != was.fraction.load()) return false;
  }
  return true;
}

// The lock file's mode for a tenant file: open to exactly its writers (its owner; a managed
// tenant's group too), and to nobody who may only read the tenant file.
mode_t lock_mode_for(const struct stat& tenant) { return (tenant.st_mode & S_IWGRP) != 0 ? 0660 : 0600; }

bool lock_file_fits(const struct stat& lock, const struct stat& tenant) {
  const mode_t want = lock_mode_for(tenant);
  return S_ISREG(lock.st_mode) && lock.st_nlink == 1 && lock.st_uid == tenant.st_uid &&
         (lock.st_mode & 07777) == want && ((want & S_IRWXG) == 0 || lock.st_gid == tenant.st_gid);
}

// Opens the tenant's lock file (locks/<name>) for a handle on `tenant`: for writing (made if this
// process owns the tenant file and it is missing), or for looking at others' locks only. -1 (and a
// reason in `error`) where it is missing, or is not the tenant's: then no lock is taken, and no
// process is taken for dead.
int open_lock_file(int locks_fd, const std::string& name, const struct stat& tenant, bool write, std::string& error) {
  if (locks_fd < 0) {
    error = "its coordinator folder has no locks/ folder";
    return -1;
  }
  const bool mine = tenant.st_uid == geteuid();
  int flags = (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  if (write && mine) flags |= O_CREAT;
  const int fd = ::openat(locks_fd, name.c_str(), flags, 0600);
  if (fd < 0) {
    error = errno == ENOENT ? "its lock file is missing (a managed tenant's is made by root: run `slicectl prepare`)"
                            : std::string("cannot open its lock file: ") + std::strerror(errno);
    return -1;
  }
  struct stat st {};
  // Ours to fix where only the mode (the umask) or the group differs.
  if (write && mine && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_nlink == 1 && st.st_uid == tenant.st_uid) {
    if ((st.st_mode & 07777) != lock_mode_for(tenant)) (void)fchmod(fd, lock_mode_for(tenant));
    if ((lock_mode_for(tenant) & S_IRWXG) != 0 && st.st_gid != tenant.st_gid) (void)fchown(fd, -1, tenant.st_gid);
  }
  if (fstat(fd, &st) != 0 || !lock_file_fits(st, tenant)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    error = "its lock file (user " + std::to_string(st.st_uid) + ", mode " + mode +
            (st.st_nlink != 1 ? ", other links" : "") +
            ") is not the tenant's: another user may have made it; root's `slicectl gc` removes it";
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

std::uint64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}

std::uint64_t coarse_monotonic_ns() {
  timespec ts;
  if (clock_gettime(CLOCK_MONOTONIC_COARSE, &ts) != 0) return monotonic_ns();
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ull + std::uint64_t(ts.tv_nsec);
}

std::uint64_t coarse_clock_tick_ns() {
  timespec res;
  if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) != 0) return 0;  // the fine clock stands in for it
  return std::uint64_t(res.tv_sec) * 1'000'000'000ull + std::uint64_t(res.tv_nsec);
}

bool valid_tenant_name(const std::string& name) { return parse_tenant_name(name).value.has_value(); }

bool prepare_coordinator_dir(const std::string& dir, std::string& error) {
  if (dir.empty() || dir[0] != '/') {
    error = "'" + dir + "' is not an absolute path";
    return false;
  }
  // Create the parents as ordinary folders, the coordinator folder itself shared and sticky.
  for (std::size_t pos = 1; (pos = dir.find('/', pos)) != std::string::npos; ++pos) {
    std::string parent = dir.substr(0, pos);
    if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      error = "cannot create " + parent + ": " + std::strerror(errno);
      return false;
    }
  }
  if (!make_dir(dir, 01777, error)) return false;
  // Its shared folders are made by root or the folder's owner: another user's tenants/ or locks/
  // would let that user remove or replace everyone's files in them.
  struct stat top {};
  if (stat(dir.c_str(), &top) != 0) {
    error = "cannot look at " + dir + ": " + std::strerror(errno);
    return false;
  }
  for (const char* sub : {kTenantsFolder, kLocksFolder}) {
    struct stat st {};
    const std::string path = dir + "/" + sub;
    if (lstat(path.c_str(), &st) != 0 && errno == ENOENT && geteuid() != 0 && geteuid() != top.st_uid) {
      error = path +
              " is missing, and only root or the folder's owner may make it: have root run `slicectl prepare` "
              "(the package's tmpfiles.d entry makes it at boot)";
      return false;
    }
    if (!make_dir(path, 01777, error)) return false;
  }
  std::string no_bell, no_members;
  make_dir(dir + "/" + kAwakeFolder, 01777, no_bell);
  make_dir(dir + "/" + kMembersFolder, 01777, no_members);  // lineage.h; without it, no tenant is inherited
  if (access((dir + "/tenants").c_str(), W_OK | X_OK) != 0) {
    error = "cannot write in " + dir + "/tenants: " + std::strerror(errno);
    return false;
  }
  return true;
}

std::unique_ptr<TenantFileHandle> TenantFileHandle::open(const std::string& dir, const std::string& name, Mode mode,
                                                         std::string& error) {
  // A file removed under us (slicectl rm holds the lock while it checks and unlinks) is not an
  // error: the next attempt creates the tenant anew. A few attempts: rm does not loop.
  for (int attempt = 0;; ++attempt) {
    bool removed = false;
    std::unique_ptr<TenantFileHandle> h = open_once(dir, name, mode, error, removed);
    if (h || !removed || attempt == 3) return h;
  }
}

std::unique_ptr<TenantFileHandle> TenantFileHandle::open_once(const std::string& dir, const std::string& name,
                                                              Mode mode, std::string& error, bool& removed) {
  if (!valid_tenant_name(name)) {
    error = "'" + name + "' is not a tenant name (1-63 of A-Z a-z 0-9 . _ -, not starting with . or -)";
    return nullptr;
  }
  const std::string path = dir + "/" + kTenantsFolder + "/" + name;
  const bool write = mode == Mode::read_write || mode == Mode::create;
  const bool root = geteuid() == 0;
  // O_NONBLOCK: a FIFO planted in place of a tenant file would block a reader's open forever; on
  // a regular file it changes nothing, and anything else is refused just below.
  int flags = (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  if (mode == Mode::create) flags |= O_CREAT;
  // The folders are opened once, none followed if it is a link, and everything after happens in
  // them: a tenants/ folder swapped for a link meanwhile must never send root's writes (or its
  // removal of the file: slicectl rm) into another folder. Root writes only in a folder that is
  // root's and sticky, where nobody else can replace or move what it opened.
  CoordinatorFolder folder;
  if (!folder.open(dir, error) || (write && !(root ? folder.fit_for_root(error) : folder.fit_for_users(error))))
    return nullptr;
  const int fd = ::openat(folder.tenants(), name.c_str(), flags, 0644);
  if (fd < 0) {
    if (errno == EACCES && write)
      error = "tenant '" + name + "' belongs to another user (" + path + " is not writable)";
    else
      error = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  std::unique_ptr<TenantFileHandle> h(new TenantFileHandle());
  h->fd_ = fd;
  h->writable_ = write;
  h->name_ = name;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = path + " is not a regular file";
    return nullptr;
  }
  // Whose limits and records a process lives by: its own user's, or those of a tenant root
  // manages (root's file, which its group may write). Another user's tenant file, even one left
  // writable, is that user's to write: a name squatted before root's service (or another user's)
  // started must not decide its limits, nor lock it out.
  if (write && st.st_uid != geteuid() && st.st_uid != 0 && (mode == Mode::create || !root)) {
    error = root ? "tenant '" + name + "' was made by user " + std::to_string(st.st_uid) +
                       ", and root's processes never join a tenant another user made (that user writes its "
                       "limits and records): remove it (`slicectl rm " +
                       name + "` as root) or choose another name"
                 : "tenant '" + name + "' belongs to user " + std::to_string(st.st_uid) +
                       ": a process joins only its own user's tenants, or one root manages (slicectl set); "
                       "choose another SLICE_TENANT";
    return nullptr;
  }
  // Its lock file: taken for writing by the tenant's writers; looked at by readers who may.
  std::string lock_problem;
  h->lock_fd_ = open_lock_file(folder.locks(), name, st, write, lock_problem);
  if (write && h->lock_fd_ < 0) {
    error = "tenant '" + name + "': " + lock_problem;
    return nullptr;
  }
  if (mode == Mode::read_write) {  // kept for a removal (slicectl rm) in the folders opened here
    h->tenants_fd_ = folder.release_tenants();
    h->locks_fd_ = folder.release_locks();
  }
  bool locked = false;
  if (write && !(locked = h->lock_init(2'000'000'000ull))) {
    error = path + ": its initialisation lock was held for over 2 s";
    return nullptr;
  }
  // Looked at again under the lock: a process creating the file at the same time has finished.
  if (fstat(fd, &st) != 0) {
    error = "cannot look at " + path + ": " + std::strerror(errno);
    if (locked) h->unlock_init();
    return nullptr;
  }
  // A tenant file never has another name: a hard link planted here (to /etc/shadow, say) must not
  // be rebuilt, mapped for writing, or given away by root.
  // Removed (slicectl rm) or replaced (an adoption) while this process waited for the lock, the
  // tenant file or its lock file: the name's new files are opened again. A process that kept the old
  // lock file would hold its slot where the others no longer look, and be taken for dead.
  if (write && (st.st_nlink == 0 || !h->linked())) {
    removed = true;
    error = path + " was removed while it was being opened";
    if (locked) h->unlock_init();
    return nullptr;
  }
  if (write && st.st_nlink != 1) {
    error = path + " has other hard links: it is not a tenant file";
    if (locked) h->unlock_init();
    return nullptr;
  }
  // From here the file is checked before it is mapped: a short or foreign file is never read.
  TenantHeader header{};
  const bool header_read = st.st_size >= static_cast<off_t>(sizeof header) &&
                           pread(fd, &header, sizeof header, 0) == static_cast<ssize_t>(sizeof header);
  bool valid = st.st_size == static_cast<off_t>(sizeof(TenantFile)) && header_read && header_valid(header, name);
  const bool fresh = !valid;
  // Before version 6 the slot locks were taken in the tenant file itself: processes of an older
  // libslice still running in it hold them there, and its file must not be rebuilt under them.
  const bool older_live = header_read && header.magic == kTenantMagic && header.version < 6 &&
                          locked_by_other(fd, kSlotLockBase, kMaxProcesses);
  if (fresh) {
    if (mode != Mode::create || (st.st_size != 0 && (older_live || h->any_live_slot()))) {
      if (st.st_size == 0)
        error = path + " is empty";
      else if (header.magic == kTenantMagic && header.version != kTenantVersion)
        // A library upgraded under running programs: the layouts differ, so the two cannot share.
        error = path + " was made by another libslice version (tenant file version " + std::to_string(header.version) +
                "; this one reads " + std::to_string(kTenantVersion) + ")" +
                (mode == Mode::create ? ": its processes still run; start this one after they exit" : "");
      else
        error = path + " is not a valid tenant file (truncated, foreign or corrupted)";
      if (locked) h->unlock_init();
      return nullptr;
    }
    // An administrator's tenant file (root's) is rebuilt only by root: a tenant that wrecked it
    // must not start again from zero usage, past the cap its administrator set.
    if (st.st_uid == 0 && geteuid() != 0) {
      error = path + " is not a valid tenant file and belongs to root: run `slicectl set " + name +
              "` as root to rebuild it";
      if (locked) h->unlock_init();
      return nullptr;
    }
    // Nobody uses it: rebuild. Reserve the pages now, so that a full file system is an error here
    // and never a SIGBUS later when a mapped page is first written.
    // posix_fallocate returns its error and leaves errno alone (which still held an earlier
    // EEXIST: "File exists" on a full disk), so take the number it returns.
    const int size_error = ftruncate(fd, 0) != 0 ? errno : posix_fallocate(fd, 0, sizeof(TenantFile));
    if (size_error != 0) {
      error = "cannot size " + path + ": " + std::strerror(size_error);
      (void)!ftruncate(fd, 0);  // best effort: an empty file is reported, and the next join rebuilds it
      h->unlock_init();
      return nullptr;
    }
  }
  if (mode == Mode::snapshot) {
    // Read once into our own memory; a file that shrank meanwhile is reported, never faulted on.
    void* copy = ::operator new (sizeof(TenantFile), std::align_val_t{alignof(TenantFile)});
    h->file_ = static_cast<TenantFile*>(copy);
    h->copied_ = true;
    // The usage records first, the rest after, then the memory meters again, until they are the
    // same before and after. A process integrates its memory by first moving its slot's stamp, then
    // adding to the meter (usage_meter.h): read in this order, an integration between the two reads
    // would be neither in the meter nor pending from the stamp, and the reading would go down by up
    // to a second of that process's memory (a counter reset to Prometheus; seen in CI). With the
    // meters unchanged around the read of the stamps, only a process stopped between its two
    // stores for the whole read can still hide one interval, and the next reading has it again.
    constexpr std::size_t kUsageAt = offsetof(TenantFile, usage);
    constexpr int kAttempts = 8;  // then the last reading, as good as one read: never a failure
    auto* bytes = static_cast<unsigned char*>(copy);
    for (int attempt = 1;; ++attempt) {
      if (pread(fd, bytes + kUsageAt, sizeof(TenantFile) - kUsageAt, kUsageAt) !=
              static_cast<ssize_t>(sizeof(TenantFile) - kUsageAt) ||
          pread(fd, bytes, kUsageAt, 0) != static_cast<ssize_t>(kUsageAt) || !header_valid(h->file_->header, name)) {
        error = path + " changed while it was read";
        return nullptr;
      }
      if (attempt == kAttempts || meters_unchanged(fd, *h->file_)) break;
    }
    return h;
  }
  void* p = mmap(nullptr, sizeof(TenantFile), write ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    error = "cannot map " + path + ": " + std::strerror(errno);
    if (locked) h->unlock_init();
    return nullptr;
  }
  h->file_ = static_cast<TenantFile*>(p);
  if (fresh) initialize(h->file_, name);
  if (locked) h->unlock_init();
  return h;
}

TenantFileHandle::~TenantFileHandle() {
  if (file_ && copied_)
    ::operator delete (file_, std::align_val_t{alignof(TenantFile)});
  else if (file_)
    munmap(file_, sizeof(TenantFile));
  for (int fd : {fd_, lock_fd_, tenants_fd_, locks_fd_})
    if (fd >= 0) close(fd);
}

bool TenantFileHandle::try_lock_slot(int slot) const { return ofd_lock(lock_fd_, kSlotLockBase + slot, F_WRLCK); }
void TenantFileHandle::unlock_slot(int slot) const { ofd_lock(lock_fd_, kSlotLockBase + slot, F_UNLCK); }
bool TenantFileHandle::slot_held_by_other(int slot) const { return locked_by_other(lock_fd_, kSlotLockBase + slot, 1); }
void TenantFileHandle::forget_after_fork() {
  // The lock file's descriptor holds the open file description that holds this slot's lock: it
  // must go, or the parent's death would stay unseen while the child lives. The mapping goes too.
  if (file_ && !copied_) munmap(file_, sizeof(TenantFile));
  for (int* fd : {&fd_, &lock_fd_, &tenants_fd_, &locks_fd_})
    if (*fd >= 0) {
      close(*fd);
      *fd = -1;
    }
  file_ = nullptr;
}

bool TenantFileHandle::remove(std::string& error) const {
  if (tenants_fd_ < 0) {
    error = "cannot remove tenant file '" + name_ + "': it was not opened for a removal";
    return false;
  }
  if (!remove_if_same(tenants_fd_, name_, fd_)) {
    const int e = errno;
    error = "cannot remove tenant file '" + name_ + "': " + std::strerror(e) +
            (e == EPERM || e == EACCES ? " (only root or the file's owner may remove it)"
             : e == ESTALE             ? " (its name is another file's now)"
                                       : "");
    return false;
  }
  if (locks_fd_ >= 0 && lock_fd_ >= 0) remove_if_same(locks_fd_, name_, lock_fd_);
  return true;
}

namespace {

// A name beside `name` that no tenant can have (a leading '.') and nobody guesses in advance.
std::string temporary_name(const std::string& name) {
  std::uint64_t random = 0;
  if (getrandom(&random, sizeof random, 0) != static_cast<ssize_t>(sizeof random))
    random = monotonic_ns() ^ static_cast<std::uint64_t>(getpid());
  return ".new." + std::to_string(random) + "." + name;
}

// Writes a fresh file under a temporary name in `folder_fd`, made by `fill`, given to root:`gid`
// with `mode`, then renames it over `name`. Nothing is written through the old name.
template <typename Fill>
bool replace_with_fresh(int folder_fd, const std::string& name, unsigned gid, mode_t mode, Fill fill,
                        std::string& error) {
  std::string temp;
  int fd = -1;
  for (int attempt = 0; fd < 0 && attempt < 8; ++attempt) {
    temp = temporary_name(name);
    fd = ::openat(folder_fd, temp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    error = "cannot make a new file for '" + name + "': " + std::strerror(errno);
    return false;
  }
  const bool ok = fill(fd, error) && fchown(fd, 0, gid) == 0 && fchmod(fd, mode) == 0 &&
                  renameat(folder_fd, temp.c_str(), folder_fd, name.c_str()) == 0;
  if (!ok) {
    if (error.empty()) error = "cannot put a new file in place of '" + name + "': " + std::strerror(errno);
    unlinkat(folder_fd, temp.c_str(), 0);
  }
  ::close(fd);
  return ok;
}

}  // namespace

bool TenantFileHandle::make_managed(const std::string& dir, const std::string& name, std::optional<unsigned> group,
                                    std::string& error, std::string* notice) {
  if (!valid_tenant_name(name)) {
    error = "'" + name + "' is not a tenant name";
    return false;
  }
  CoordinatorFolder folder;
  if (!folder.open(dir, error) || !folder.fit_for_root(error)) return false;
  if (folder.locks() < 0) {
    error = dir + " has no " + kLocksFolder + "/ folder";
    return false;
  }
  const unsigned gid = group.value_or(0);
  const mode_t mode = group ? 0664 : 0644;
  // What is there now, looked at without following a link; changed only by replacing it. Its
  // registration lock is held from the look to the renames: a process that joins meanwhile waits for
  // it, then finds its files replaced and opens the new ones (open_once).
  const int old_fd = ::openat(folder.tenants(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  const int old_lock = ::openat(folder.locks(), name.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  struct Closer {
    int a, b;
    ~Closer() {
      if (a >= 0) ::close(a);
      if (b >= 0) ::close(b);
    }
  } closer{old_fd, old_lock};
  struct stat old {
  }, lock{};
  const bool lock_is_file = old_lock >= 0 && fstat(old_lock, &lock) == 0 && S_ISREG(lock.st_mode) && lock.st_nlink == 1;
  // Waited for only in root's own lock file: in a user's, the user may hold it for ever (a squatter
  // keeping the name), and their processes are theirs to lose.
  if (lock_is_file && lock.st_uid == 0) {
    const std::uint64_t deadline = monotonic_ns() + 2'000'000'000ull;
    while (!ofd_lock(old_lock, kInitLockByte, F_WRLCK)) {
      if (monotonic_ns() > deadline) {
        error = "tenant '" + name + "': its registration lock was held for over 2 s (a process is joining): try again";
        return false;
      }
      usleep(200);
    }
  } else if (lock_is_file) {
    (void)ofd_lock(old_lock, kInitLockByte, F_WRLCK);
  }
  if (old_fd >= 0 && fstat(old_fd, &old) == 0 && S_ISREG(old.st_mode)) {
    TenantHeader header{};
    const bool header_read = pread(old_fd, &header, sizeof header, 0) == static_cast<ssize_t>(sizeof header);
    const bool valid =
        old.st_size == static_cast<off_t>(sizeof(TenantFile)) && header_read && header_valid(header, name);
    const bool as_asked = valid && old.st_nlink == 1 && old.st_uid == 0 && old.st_gid == gid &&
                          (old.st_mode & 07777) == mode && lock_is_file && lock_file_fits(lock, old);
    // Root's alone so far (its own tenant's, or one managed without a group): nobody else can hold a
    // descriptor to write it, so it is given to the group where it is, processes and all.
    const bool roots_alone = valid && old.st_nlink == 1 && old.st_uid == 0 && (old.st_mode & 022) == 0 &&
                             lock_is_file && lock.st_uid == 0 && (lock.st_mode & 077) == 0;
    const bool given = !as_asked && roots_alone && fchown(old_lock, 0, gid) == 0 &&
                       fchmod(old_lock, group ? 0660 : 0600) == 0 && fchown(old_fd, 0, gid) == 0 &&
                       fchmod(old_fd, mode) == 0;
    if (as_asked || given) return true;  // the lock goes with the descriptor
    // Otherwise replaced, whatever runs in it: a name another user squats with a process of their
    // own must not stay theirs. Processes that run in the old file go on counting there (their
    // memory not charged to the tenant now managed): named, so that they can be stopped.
    int live = 0;
    std::string pids;
    for (int slot = 0; lock_is_file && slot < kMaxProcesses; ++slot) {
      if (!locked_by_other(old_lock, kSlotLockBase + slot, 1)) continue;
      std::int32_t pid = 0;
      if (++live <= 8 && pread(old_fd, &pid, sizeof pid,
                               static_cast<off_t>(offsetof(TenantFile, slots) + slot * sizeof(ProcessSlot) +
                                                  offsetof(ProcessSlot, pid))) == static_cast<ssize_t>(sizeof pid))
        pids += (pids.empty() ? "" : " ") + std::to_string(pid);
    }
    // An older libslice's processes held their locks in the tenant file itself.
    if (header_read && header.magic == kTenantMagic && header.version < 6 &&
        locked_by_other(old_fd, kSlotLockBase, kMaxProcesses))
      ++live;
    if (live > 0 && notice != nullptr)
      *notice = "tenant '" + name + "': " + std::to_string(live) + " process" + (live == 1 ? "" : "es") + " of user " +
                std::to_string(old.st_uid) + " still run in its old file (PID " + pids + (live > 8 ? " ..." : "") +
                ", as that file says): their memory is not charged to the tenant; stop them";
  }
  // The lock file first: a process that meets the new tenant file with the old lock file (or the
  // reverse) finds them of different owners and stops, rather than lock one and count in the other.
  const auto empty = [](int, std::string&) { return true; };
  const auto tenant = [&](int fd, std::string& why) {
    if (const int e = posix_fallocate(fd, 0, sizeof(TenantFile)); e != 0) {
      why = "cannot size a new tenant file for '" + name + "': " + std::strerror(e);
      return false;
    }
    void* p = mmap(nullptr, sizeof(TenantFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      why = "cannot map a new tenant file for '" + name + "': " + std::strerror(errno);
      return false;
    }
    initialize(static_cast<TenantFile*>(p), name);
    munmap(p, sizeof(TenantFile));
    return true;
  };
  return replace_with_fresh(folder.locks(), name, gid, group ? 0660 : 0600, empty, error) &&
         replace_with_fresh(folder.tenants(), name, gid, mode, tenant, error);
}

int remove_stray_lock_files(const std::string& dir) {
  CoordinatorFolder folder;
  std::string unusable;
  if (!folder.open(dir, unusable) || folder.locks() < 0) return 0;
  int removed = 0;
  const auto list = [](int folder_fd) {
    std::vector<std::string> names;
    const int list_fd = ::dup(folder_fd);
    DIR* d = list_fd >= 0 ? ::fdopendir(list_fd) : nullptr;
    if (d == nullptr) {
      if (list_fd >= 0) ::close(list_fd);
      return names;
    }
    while (const dirent* e = ::readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) names.emplace_back(e->d_name);
    ::closedir(d);
    return names;
  };
  for (const std::string& name : list(folder.locks())) {
    if (!valid_tenant_name(name)) continue;
    const int lock = ::openat(folder.locks(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (lock < 0) continue;
    struct stat lock_st {
    }, tenant_st{};
    const bool has_tenant = fstatat(folder.tenants(), name.c_str(), &tenant_st, AT_SYMLINK_NOFOLLOW) == 0;
    // Another owner's than its tenant file's: none of the tenant's processes can be in it (they
    // refuse it), whoever holds a lock there. Without a tenant file: when nobody holds a lock in it.
    // (One that differs in its mode alone may be a process's own, a moment before it sets the mode.)
    const bool stray =
        fstat(lock, &lock_st) == 0 && (has_tenant ? lock_st.st_uid != tenant_st.st_uid || !S_ISREG(lock_st.st_mode)
                                                  : !locked_by_other(lock, kInitLockByte, 1 + kMaxProcesses));
    if (stray && remove_if_same(folder.locks(), name, lock)) ++removed;
    ::close(lock);
  }
  // Temporary files of an adoption that died before its rename (root's, a minute old).
  const std::int64_t now = ::time(nullptr);
  for (const int folder_fd : {folder.tenants(), folder.locks()})
    for (const std::string& name : list(folder_fd)) {
      struct stat st {};
      if (name.rfind(".new.", 0) == 0 && fstatat(folder_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISREG(st.st_mode) && st.st_uid == 0 && now - st.st_mtime > 60 && unlinkat(folder_fd, name.c_str(), 0) == 0)
        ++removed;
    }
  return removed;
}

bool TenantFileHandle::linked() const {
  struct stat st {
  }, lock{};
  return fstat(fd_, &st) == 0 && st.st_nlink > 0 &&
         (lock_fd_ < 0 || (fstat(lock_fd_, &lock) == 0 && lock.st_nlink > 0));
}

bool TenantFileHandle::any_live_slot() const { return locked_by_other(lock_fd_, kSlotLockBase, kMaxProcesses); }

bool TenantFileHandle::lock_init(std::uint64_t timeout_ns) const {
  // Held only for a few system calls by a live process, and dropped by the kernel when one dies.
  const std::uint64_t deadline = monotonic_ns() + timeout_ns;
  if (lock_fd_ < 0) return false;
  while (!ofd_lock(lock_fd_, kInitLockByte, F_WRLCK)) {
    if (monotonic_ns() > deadline) return false;
    usleep(200);
  }
  return true;
}

void TenantFileHandle::unlock_init() const { ofd_lock(lock_fd_, kInitLockByte, F_UNLCK); }

}  // namespace slice
