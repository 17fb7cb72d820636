#include "awake_bell.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace slice {
namespace {

// A modification time this close to now may share its clock tick with a later change.
constexpr std::int64_t kStampTickNs = 20'000'000;

std::int64_t realtime_ns() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

bool ring_awake_bell(const std::string& dir, const std::string& tenant) {
  const std::string path = dir + "/" + kAwakeFolder + "/" + tenant + "." + std::to_string(getpid());
  for (int attempt = 0; attempt < 2; ++attempt) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      ::close(fd);
      return ::unlink(path.c_str()) == 0;
    }
    // Left by a process of the same number that died between the two steps: it goes, and the bell
    // rings with its removal all the same.
    if (errno != EEXIST || ::unlink(path.c_str()) != 0) return false;
  }
  return true;
}

FolderChanges::Seen FolderChanges::look() {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) return Seen::missing;
  const std::int64_t mtime = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  const bool changed = mtime != mtime_ns_ || realtime_ns() - mtime < kStampTickNs;
  mtime_ns_ = mtime;
  return changed ? Seen::changed : Seen::unchanged;
}

}  // namespace slice
