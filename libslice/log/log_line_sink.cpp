#include "log_line_sink.h"

#include <unistd.h>

#include <cerrno>

#include "config_values.h"

namespace slice::log {
namespace {

// %* : the level as SLICE_LOG_LEVEL names it.
class LevelWord final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    const std::string_view word = to_string(level_of(msg.level));
    dest.append(word.data(), word.data() + word.size());
  }
  std::unique_ptr<spdlog::custom_flag_formatter> clone() const override { return std::make_unique<LevelWord>(); }

 private:
  static LogLevel level_of(spdlog::level::level_enum level) {
    switch (level) {
      case spdlog::level::trace:
        return LogLevel::trace;
      case spdlog::level::debug:
        return LogLevel::debug;
      case spdlog::level::info:
        return LogLevel::info;
      case spdlog::level::warn:
        return LogLevel::warn;
      default:
        return LogLevel::error;
    }
  }
};

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

std::unique_ptr<spdlog::pattern_formatter> line_formatter() {
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<LevelWord>('*').set_pattern("libslice[%P] %*: %v");  // no time flag: no localtime()
  return formatter;
}

LineSink::LineSink(const std::atomic<int>& fd) : fd_(fd), formatter_(line_formatter()) {}

void LineSink::log(const spdlog::details::log_msg& msg) {
  const std::unique_ptr<spdlog::formatter> formatter = formatter_->clone();
  spdlog::memory_buf_t line;
  formatter->format(msg, line);  // ends with the newline
  write_all(fd_.load(std::memory_order_relaxed), line.data(), line.size());
}

void LineSink::set_pattern(const std::string& pattern) {
  auto formatter = line_formatter();
  formatter->set_pattern(pattern);
  formatter_ = std::move(formatter);
}

void LineSink::set_formatter(std::unique_ptr<spdlog::formatter> formatter) { formatter_ = std::move(formatter); }

}  // namespace slice::log
