#include "awake_bell.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

namespace slice {
namespace {

// The coarse clock that stamps a folder ticks at least this often (1-10 ms, by the kernel's HZ).
constexpr std::int64_t kStampTickNs = 20'000'000;

std::int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

bool ring_awake_bell(const std::string& dir) {
  // The folder's times set to now: one call, no file, nothing another user could stand in the way
  // of (a name made in advance, a file left behind). Anyone who may write in the folder may.
  const int fd = ::open((dir + "/" + kAwakeFolder).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  const bool rang = ::futimens(fd, nullptr) == 0;
  ::close(fd);
  return rang;
}

bool bell_trusted(const std::string& dir) {
  struct stat folder {
  }, bell{};
  if (::lstat((dir + "/" + kAwakeFolder).c_str(), &bell) != 0 || ::stat(dir.c_str(), &folder) != 0) return false;
  return S_ISDIR(bell.st_mode) && (bell.st_mode & 07777) == 01777 && (bell.st_uid == 0 || bell.st_uid == folder.st_uid);
}

FolderChanges::Seen FolderChanges::look() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return Seen::missing;
  const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  const std::int64_t now = realtime_ns();
  // The last look came within a tick of the stamp it saw: a change after that look, in the same
  // tick, carries the same stamp. Once a look comes a tick after the stamp, any later change has
  // a new one.
  const bool changed = mtime != mtime_ns_ || (looked_ns_ >= mtime && looked_ns_ - mtime < kStampTickNs);
  mtime_ns_ = mtime;
  looked_ns_ = now;
  return changed ? Seen::changed : Seen::unchanged;
}

}  // namespace slice
