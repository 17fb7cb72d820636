#include "violations.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace simgpu {

void report_violation(const char* function, const std::string& what) {
  char prefix[64];
  std::snprintf(prefix, sizeof prefix, "simgpu[%d]: illegal call: ", static_cast<int>(getpid()));
  const std::string line = prefix + std::string(function) + ": " + what + "\n";
  // One write(2) per line, O_APPEND: lines of concurrent processes never interleave.
  if (const char* path = std::getenv("SIMGPU_VIOLATIONS"); path != nullptr && *path != '\0') {
    const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      if (::write(fd, line.data(), line.size()) < 0) {
        // Nothing more to do: standard error still gets the line.
      }
      ::close(fd);
    }
  }
  if (::write(2, line.data(), line.size()) < 0) {
    // As above.
  }
}

}  // namespace simgpu
