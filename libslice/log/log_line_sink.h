// The spdlog sink behind libslice's log: formats each line with the pattern
// `libslice[PID] LEVEL: message` and writes it with one write(2), so that lines from several
// threads and processes never interleave (the file is opened O_APPEND) and nothing is buffered
// when the process dies right after. It takes no lock: each line is formatted by a private copy
// of the formatter (spdlog's formatters cache state between lines), so a thread that forks while
// another logs leaves the child nothing to deadlock on, and the PID is read per line, so a forked
// child logs with its own.
#pragma once

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/sink.h>

#include <atomic>
#include <memory>
#include <string>

namespace slice::log {

class LineSink final : public spdlog::sinks::sink {
 public:
  // `fd`: the destination, read for every line (configure() may change it).
  explicit LineSink(const std::atomic<int>& fd);

  void log(const spdlog::details::log_msg& msg) override;
  void flush() override {}  // nothing is ever buffered
  // Both only before the first line: the formatter is read without a lock.
  void set_pattern(const std::string& pattern) override;
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override;

 private:
  const std::atomic<int>& fd_;
  std::unique_ptr<spdlog::formatter> formatter_;
};

// The pattern_formatter of libslice's lines: spdlog's %P and %v, and our level words (error, warn,
// info, debug, trace) where spdlog's own %l would say "warning".
std::unique_ptr<spdlog::pattern_formatter> line_formatter();

}  // namespace slice::log
