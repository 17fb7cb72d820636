// libslice's log lines: `libslice[pid] level: message`, to standard error or SLICE_LOG_FILE.
// Plain write(2) of one whole line, so lines from several threads and processes never interleave
// and nothing is buffered when a process dies. Until configured, only errors are written (a bad
// configuration must be reported before the level can be trusted).
#pragma once

#include <string_view>

#include "config_values.h"

namespace slice::log {

// Sets the level and the destination. `file` empty: standard error. A file that cannot be opened
// falls back to standard error, with an error line saying so.
void configure(LogLevel level, std::string_view file);

bool enabled(LogLevel level) noexcept;
void write(LogLevel level, std::string_view message) noexcept;

inline void error(std::string_view m) noexcept { write(LogLevel::error, m); }
inline void warn(std::string_view m) noexcept { write(LogLevel::warn, m); }
inline void info(std::string_view m) noexcept { write(LogLevel::info, m); }
inline void debug(std::string_view m) noexcept { write(LogLevel::debug, m); }

}  // namespace slice::log
