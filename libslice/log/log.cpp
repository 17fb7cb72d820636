#include "log.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/logger.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <vector>

#include "log_line_sink.h"
#include "log_repeats.h"
#include "printable.h"

namespace slice::log {
namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::error)};
std::atomic<int> g_fd{STDERR_FILENO};

// Made at the first line and never destroyed: a log call from an atexit handler or a static
// destructor, ours or the application's, must still find it.
struct Logging {
  spdlog::logger logger{"libslice", std::make_shared<LineSink>(g_fd)};
  std::mutex repeats_mu;  // held around RepeatFilter only, never while writing
  RepeatFilter repeats;
};

Logging* g_logging = nullptr;

std::int64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

spdlog::level::level_enum spdlog_level(LogLevel level) {
  switch (level) {
    case LogLevel::trace:
      return spdlog::level::trace;
    case LogLevel::debug:
      return spdlog::level::debug;
    case LogLevel::info:
      return spdlog::level::info;
    case LogLevel::warn:
      return spdlog::level::warn;
    default:
      return spdlog::level::err;
  }
}

void emit(Logging& l, LogLevel level, std::string_view message) {
  l.logger.log(spdlog_level(level), spdlog::string_view_t(message.data(), message.size()));
}

void emit_all(Logging& l, const std::vector<RepeatSummary>& summaries) {
  for (const RepeatSummary& s : summaries) emit(l, s.level, s.line());
}

// A fork while another thread holds repeats_mu would leave the child a lock nobody releases:
// the forking thread takes it first, and both sides let go after.
void lock_before_fork() { g_logging->repeats_mu.lock(); }
void unlock_in_parent() { g_logging->repeats_mu.unlock(); }
void unlock_in_child() {
  g_logging->repeats_mu.unlock();
  g_logging->repeats.clear();  // the parent's counts are not the child's
}

// What was suppressed and never summarised is said at exit, not lost.
void write_pending_repeats() noexcept {
  try {
    std::vector<RepeatSummary> due;
    {
      std::lock_guard<std::mutex> lock(g_logging->repeats_mu);
      g_logging->repeats.drain(now_ns(), due);
    }
    emit_all(*g_logging, due);
  } catch (...) {
  }
}

Logging& logging() {
  static Logging* made = [] {
    auto* l = new Logging();                                 // leaked on purpose: see Logging
    l->logger.set_level(spdlog::level::trace);               // the level is ours (enabled()), checked before spdlog
    l->logger.set_error_handler([](const std::string&) {});  // a failing log never disturbs the application
    g_logging = l;
    pthread_atfork(lock_before_fork, unlock_in_parent, unlock_in_child);
    std::atexit([] { write_pending_repeats(); });
    return l;
  }();
  return *made;
}

}  // namespace

void configure(LogLevel level, std::string_view file) {
  g_level.store(static_cast<int>(level), std::memory_order_relaxed);
  int fd = STDERR_FILENO;
  if (!file.empty() && level != LogLevel::off) {
    const std::string path(file);
    // O_APPEND: each write(2) lands whole at the end, whichever process makes it. Never through a
    // link, and only a regular file (a FIFO would block, a device is not a log): a link planted
    // where the log goes must not turn libslice's writes elsewhere (issue 29). O_NONBLOCK: the open
    // of a FIFO returns; it is refused just below.
    fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    struct stat st {};
    int open_errno = errno;
    if (fd >= 0 && (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))) {
      ::close(fd);
      fd = -1;
      open_errno = EINVAL;
    }
    if (fd >= 0) fcntl(fd, F_SETFL, O_WRONLY | O_APPEND);  // writes block as a log's should
    if (fd < 0) {
      if (const int old = g_fd.exchange(STDERR_FILENO); old != STDERR_FILENO) ::close(old);
      error("SLICE_LOG_FILE='" + printable(path, 300) + "' cannot be opened (" +
            (open_errno == EINVAL  ? std::string("not a regular file")
             : open_errno == ELOOP ? std::string("a symbolic link")
                                   : std::string(std::strerror(open_errno))) +
            "); logging to standard error");
      return;
    }
  }
  if (const int old = g_fd.exchange(fd); old != STDERR_FILENO) ::close(old);
}

bool enabled(LogLevel level) noexcept {
  return level != LogLevel::off && static_cast<int>(level) <= g_level.load(std::memory_order_relaxed);
}

int destination_fd() noexcept { return g_fd.load(std::memory_order_relaxed); }

void write(LogLevel level, std::string_view message) noexcept {
  if (!enabled(level)) return;
  // A line written from inside a program's CUDA call leaves its errno as it was.
  const int saved_errno = errno;
  struct Restore {
    int value;
    ~Restore() { errno = value; }
  } restore{saved_errno};
  try {
    Logging& l = logging();
    std::vector<RepeatSummary> due;
    bool admitted = false;
    {
      std::lock_guard<std::mutex> lock(l.repeats_mu);
      admitted = l.repeats.admit(level, message, now_ns(), due);
    }
    emit_all(l, due);
    if (admitted) emit(l, level, message);
  } catch (...) {  // out of memory while logging: drop the line
  }
}

}  // namespace slice::log
