// A log line built and written from a signal handler (the crash report): no allocation, no lock,
// nothing but stack memory and one write(2) to the log's destination, in the same
// `libslice[PID] LEVEL: message` form as every other line. Too long a line is cut, never split.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config_values.h"

namespace slice::log {

class SignalSafeLine {
 public:
  explicit SignalSafeLine(LogLevel level) noexcept;  // starts the line with `libslice[PID] LEVEL: `

  SignalSafeLine& text(std::string_view s) noexcept;
  SignalSafeLine& decimal(std::int64_t n) noexcept;
  SignalSafeLine& hex(std::uintptr_t n) noexcept;  // 0x...

  // Writes the line (with its newline) when `level` is enabled; SLICE_LOG_LEVEL=off silences it too.
  void write() noexcept;

 private:
  static constexpr std::size_t kCapacity = 512;
  LogLevel level_;
  char buffer_[kCapacity];
  std::size_t size_ = 0;
};

}  // namespace slice::log
