#include "log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace slice::log {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::error)};
std::atomic<int> g_fd{STDERR_FILENO};

void write_all(int fd, const char* data, std::size_t size) noexcept {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere to report a failing log: never disturb the application for it
    data += n;
    size -= static_cast<std::size_t>(n);
  }
}

}  // namespace

void configure(LogLevel level, std::string_view file) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
  if (file.empty() || level == LogLevel::off) return;
  const std::string path(file);
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    error("SLICE_LOG_FILE='" + path + "' cannot be opened (" + std::strerror(errno) +
          "); logging to standard error");
    return;
  }
  const int old = g_fd.exchange(fd);
  if (old != STDERR_FILENO) ::close(old);
}

bool enabled(LogLevel level) noexcept {
  return level != LogLevel::off &&
         static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

void write(LogLevel level, std::string_view message) noexcept {
  if (!enabled(level)) return;
  try {
    std::string line = "libslice[" + std::to_string(::getpid()) + "] ";
    line += to_string(level);
    line += ": ";
    line += message;
    line += '\n';
    write_all(g_fd.load(std::memory_order_relaxed), line.data(), line.size());
  } catch (...) {  // out of memory while logging: drop the line
  }
}

}  // namespace slice::log
