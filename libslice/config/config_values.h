// Parsers of the non-numeric SLICE_* values: priorities, log levels, tenant names, paths, flags.
// Words are matched without regard to case (WARN, High); names and paths exactly.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "parse_result.h"

namespace slice {

enum class Priority { high, normal, low };
// The order priorities are served in, as a number: high 2, normal 1, low 0 (slice.h's encoding too).
constexpr int priority_rank(Priority p) { return p == Priority::high ? 2 : p == Priority::normal ? 1 : 0; }
enum class LogLevel { off, error, warn, info, debug, trace };

// Tenant names become file names in the coordinator directory, so they are short and plain.
inline constexpr std::size_t kMaxTenantNameLength = 63;
// The folders libslice uses unless told otherwise (SLICE_COORDINATOR_DIR, SLICE_POLICY_DIR), named
// here only: macros, so that help texts can be made of them at compile time.
#define SLICE_DEFAULT_COORDINATOR_DIR "/dev/shm/libslice"
#define SLICE_DEFAULT_POLICY_DIR "/etc/libslice/policy"
inline constexpr std::string_view kDefaultCoordinatorDir = SLICE_DEFAULT_COORDINATOR_DIR;
inline constexpr std::string_view kDefaultPolicyDir = SLICE_DEFAULT_POLICY_DIR;

// PATH_MAX less the terminating NUL: a longer path cannot be opened anyway.
inline constexpr std::size_t kMaxPathLength = 4095;

ParseResult<Priority> parse_priority(std::string_view text);
ParseResult<LogLevel> parse_log_level(std::string_view text);

// 1–63 characters of A-Z a-z 0-9 . _ -, not starting with '.' or '-'.
ParseResult<std::string> parse_tenant_name(std::string_view text);

// An absolute path: relative ones would name a different directory in each working directory,
// and processes that must share a coordinator would silently not.
ParseResult<std::string> parse_directory(std::string_view text);

// Any non-empty path.
ParseResult<std::string> parse_file(std::string_view text);

// 1/true/yes and 0/false/no; empty is false (unset).
ParseResult<bool> parse_flag(std::string_view text);

std::string_view to_string(Priority priority);
std::string_view to_string(LogLevel level);

}  // namespace slice
