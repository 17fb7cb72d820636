// Repeated log lines, limited: the same line (same level and text) written more than kBurst times
// within kWindowNs is suppressed, and one later line says how many were dropped. That line comes
// when the same text is written again after its window, when any line is written after the
// window closed, or at exit (log.cpp drains the filter then). Plain data driven by a clock the
// caller passes in, so that tests can move time.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config_values.h"

namespace slice::log {

// A suppressed run of one line: written as `message (repeated N more times in the last S s)`.
struct RepeatSummary {
  LogLevel level = LogLevel::off;
  std::string message;
  std::uint64_t suppressed = 0;
  std::uint64_t seconds = 0;  // since the run's window opened, rounded up, at least 1

  std::string line() const;
};

class RepeatFilter {
 public:
  static constexpr unsigned kBurst = 10;                     // lines per window written as they come
  static constexpr std::int64_t kWindowNs = 10'000'000'000;  // 10 s
  static constexpr std::size_t kTracked = 64;                // distinct lines remembered at once

  // Whether this line is to be written now. Summaries that are due (closed windows, a line
  // forgotten to make room) are appended to `due`, to be written before it.
  bool admit(LogLevel level, std::string_view message, std::int64_t now_ns, std::vector<RepeatSummary>& due);

  // Every summary still pending, whatever its window (the process is exiting).
  void drain(std::int64_t now_ns, std::vector<RepeatSummary>& due);

  // Forgets everything (a forked child starts with its own counts).
  void clear();

 private:
  struct Tracked {
    bool used = false;
    LogLevel level = LogLevel::off;
    std::string message;
    std::int64_t window_start = 0;
    std::uint64_t seen = 0;        // in this window
    std::uint64_t suppressed = 0;  // in this window
  };

  static RepeatSummary summary_of(Tracked& t, std::int64_t now_ns);
  Tracked& slot_for_new_line(std::int64_t now_ns, std::vector<RepeatSummary>& due);

  std::array<Tracked, kTracked> tracked_{};
};

}  // namespace slice::log
