#include "tenant_file.h"

#include "lineage.h"

#include "awake_bell.h"
#include "policy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

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

bool locked_by_other(int fd, std::int64_t start, std::int64_t len) {
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
  if (!make_dir(dir, 01777, error) || !make_dir(dir + "/tenants", 01777, error)) return false;
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
  const std::string path = dir + "/tenants/" + name;
  const bool write = mode == Mode::read_write || mode == Mode::create;
  // O_NONBLOCK: a FIFO planted in place of a tenant file would block a reader's open forever; on
  // a regular file it changes nothing, and anything else is refused just below.
  int flags = (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK;
  if (mode == Mode::create) flags |= O_CREAT;
  // One name at a time, none followed if it is a link: a tenants/ folder swapped for a link between
  // a check and this open must never send root's writes into another folder.
  int fd = -1;
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  const int tenants_fd = dir_fd < 0 ? -1 : ::openat(dir_fd, "tenants", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (tenants_fd >= 0) fd = ::openat(tenants_fd, name.c_str(), flags, 0644);
  const int open_errno = errno;
  if (tenants_fd >= 0) close(tenants_fd);
  if (dir_fd >= 0) close(dir_fd);
  errno = open_errno;
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
  bool locked = false;
  if (write && !(locked = h->lock_init(2'000'000'000ull))) {
    error = path + ": its initialisation lock was held for over 2 s";
    return nullptr;
  }
  // Looked at under the lock: a process creating the file at the same time has finished.
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    error = path + " is not a regular file";
    if (locked) h->unlock_init();
    return nullptr;
  }
  // A tenant file never has another name: a hard link planted here (to /etc/shadow, say) must not
  // be rebuilt, mapped for writing, or given away by root.
  if (write && st.st_nlink == 0) {
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
  if (fresh) {
    if (mode != Mode::create || (st.st_size != 0 && h->any_live_slot())) {
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
  if (fd_ >= 0) close(fd_);
}

bool TenantFileHandle::try_lock_slot(int slot) const { return ofd_lock(fd_, kSlotLockBase + slot, F_WRLCK); }
void TenantFileHandle::unlock_slot(int slot) const { ofd_lock(fd_, kSlotLockBase + slot, F_UNLCK); }
bool TenantFileHandle::slot_held_by_other(int slot) const { return locked_by_other(fd_, kSlotLockBase + slot, 1); }
void TenantFileHandle::forget_after_fork() {
  // The mapping holds the open file description as much as the descriptor does, and with it this
  // slot's lock: both must go, or the parent's death would stay unseen while the child lives.
  if (file_ && !copied_) munmap(file_, sizeof(TenantFile));
  if (fd_ >= 0) close(fd_);
  file_ = nullptr;
  fd_ = -1;
}

bool TenantFileHandle::set_owner(unsigned uid, unsigned gid, unsigned mode, std::string& error) const {
  if (fchown(fd_, uid, gid) != 0 || fchmod(fd_, mode) != 0) {
    error = "cannot give tenant file '" + name_ + "' to " + std::to_string(uid) + ":" + std::to_string(gid) + ": " +
            std::strerror(errno);
    return false;
  }
  return true;
}

bool TenantFileHandle::owner(unsigned& uid, unsigned& gid) const {
  struct stat st {};
  if (fstat(fd_, &st) != 0) return false;
  uid = st.st_uid;
  gid = st.st_gid;
  return true;
}

bool TenantFileHandle::linked() const {
  struct stat st {};
  return fstat(fd_, &st) == 0 && st.st_nlink > 0;
}

bool TenantFileHandle::any_live_slot() const { return locked_by_other(fd_, kSlotLockBase, kMaxProcesses); }

bool TenantFileHandle::lock_init(std::uint64_t timeout_ns) const {
  // Held only for a few system calls by a live process, and dropped by the kernel when one dies.
  const std::uint64_t deadline = monotonic_ns() + timeout_ns;
  while (!ofd_lock(fd_, kInitLockByte, F_WRLCK)) {
    if (monotonic_ns() > deadline) return false;
    usleep(200);
  }
  return true;
}

void TenantFileHandle::unlock_init() const { ofd_lock(fd_, kInitLockByte, F_UNLCK); }

}  // namespace slice
