// libslice's log lines: `libslice[pid] level: message`, to standard error or SLICE_LOG_FILE.
// Formatted by spdlog (compiled into libslice, hidden: an application's own spdlog never meets
// ours) and written by LineSink (log_line_sink.h) with one write(2) per whole line, so lines from
// several threads and processes never interleave and nothing is buffered when a process dies.
// The same line repeated fast is written kBurst times per window, then counted (log_repeats.h).
// Until configured, only errors are written (a bad configuration must be reported before the
// level can be trusted). Safe from any thread, in a forked child, and while the process exits:
// the logger is made at the first line and never destroyed, and spdlog's registry is not used.
#pragma once

#include <string_view>

#include "config_values.h"

namespace slice::log {

// Sets the level and the destination. `file` empty: standard error. A file that cannot be opened
// falls back to standard error, with an error line saying so.
void configure(LogLevel level, std::string_view file);

bool enabled(LogLevel level) noexcept;  // async-signal-safe
void write(LogLevel level, std::string_view message) noexcept;

inline void error(std::string_view m) noexcept { write(LogLevel::error, m); }
inline void warn(std::string_view m) noexcept { write(LogLevel::warn, m); }
inline void info(std::string_view m) noexcept { write(LogLevel::info, m); }
inline void debug(std::string_view m) noexcept { write(LogLevel::debug, m); }

// The file descriptor lines go to; async-signal-safe (the crash report, log_signal_safe.h).
int destination_fd() noexcept;

}  // namespace slice::log
