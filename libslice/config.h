// libslice's configuration: every SLICE_* variable (variables.inc) parsed into one Config.
//
// The rule that matters: bad configuration never means "unlimited". parse_config gives either a
// complete Config or one error naming the variable, the value and a valid example; an unknown
// SLICE_* name (a typo of SLICE_MEMORY_LIMIT, say) is an error too, because ignoring it would
// silently lift the cap the user meant to set.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "config_values.h"
#include "quantity.h"

namespace slice {

// The highest device ordinal a per-device variable (SLICE_MEMORY_LIMIT_<n>) may name. No machine
// has more devices, so a larger suffix is a typo.
inline constexpr int kMaxDeviceOrdinal = 255;

// A setting with a value for every device and overrides for single ordinals (NAME and NAME_<n>).
template <typename Value, typename Fallback = Value>
struct PerDevice {
  Fallback every_device{};
  std::map<int, Value> by_device;  // ordinal as this process numbers devices -> value

  Fallback for_device(int ordinal) const {
    const auto it = by_device.find(ordinal);
    return it != by_device.end() ? Fallback(it->second) : every_device;
  }
  bool operator==(const PerDevice&) const = default;
};

// Field names are the FIELD column of variables.inc.
struct Config {
  PerDevice<MemoryLimit, std::optional<MemoryLimit>> memory_limit;  // nullopt: no cap
  PerDevice<unsigned> compute_share{.every_device = 100, .by_device = {}};  // percent, 1-100
  unsigned compute_limit = 100;                                     // percent, 1-100
  Priority priority = Priority::normal;
  std::string tenant;  // empty: libslice assigns a unique name
  std::string coordinator_dir = "/dev/shm/libslice";
  LogLevel log_level = LogLevel::warn;
  std::string log_file;  // empty: standard error
  bool disable = false;

  bool operator==(const Config&) const = default;
};

// Why the configuration was refused, enough for the user to fix it without reading the docs.
struct ConfigError {
  std::string variable;  // as set, e.g. SLICE_MEMORY_LIMIT_1
  std::string value;     // as given, unescaped
  std::string reason;    // e.g. "unknown unit 'X' (...)"
  std::string example;   // a valid setting, e.g. SLICE_MEMORY_LIMIT_1=4Gi

  // One line, non-printable bytes escaped:
  //   SLICE_MEMORY_LIMIT='12X' is not valid: <reason>; example: SLICE_MEMORY_LIMIT=4Gi
  std::string message() const;
};

struct ConfigResult {
  std::optional<Config> config;  // engaged exactly when there was no error
  ConfigError error;             // meaningful only when config is empty

  explicit operator bool() const { return config.has_value(); }
};

// Variables by name. Tests build one directly; slice_environment reads a process's.
using Environment = std::map<std::string, std::string, std::less<>>;

// The SLICE_* entries of an environment block such as `environ`. Where a name appears twice the
// first wins, as it does for getenv.
Environment slice_environment(const char* const* envp);

// slice_environment of this process's `environ`.
Environment process_slice_environment();

// Every SLICE_* entry of env must be valid; other names are ignored. When several are wrong, the
// error is about the first by name. SLICE_DISABLE=1 gives Config{.disable = true} without reading
// the rest, so that the escape hatch works even when another variable is broken.
ConfigResult parse_config(const Environment& env);

}  // namespace slice
