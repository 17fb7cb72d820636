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

#include <type_traits>

#include "config_values.h"
#include "gpu_uuid.h"
#include "quantity.h"
#include "variables.h"

namespace slice {

// The highest device ordinal a per-device variable (SLICE_MEMORY_LIMIT_<n>) may name. No machine
// has more devices, so a larger suffix is a typo.
inline constexpr int kMaxDeviceOrdinal = 255;

// A setting with a value for every device and overrides for single devices: NAME, NAME_<n> by
// ordinal, and NAME_GPU_<uuid> by the GPU's UUID with its dashes written as underscores (variable
// names cannot hold '-'). The UUID form wins over the ordinal: an ordinal depends on the process's
// CUDA_VISIBLE_DEVICES, a UUID names one card everywhere (the Kubernetes device plugin sets it).
template <typename Value, typename Fallback = Value>
struct PerDevice {
  Fallback every_device{};
  std::map<int, Value> by_device;  // ordinal as this process numbers devices -> value
  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (lowercase, as NVML and libslice print it) -> value
  std::map<std::string, Value, std::less<>> by_uuid;

  Fallback for_device(int ordinal) const {
    const auto it = by_device.find(ordinal);
    return it != by_device.end() ? Fallback(it->second) : every_device;
  }
  Fallback for_device(int ordinal, std::string_view uuid) const {
    const auto it = by_uuid.find(uuid);
    return it != by_uuid.end() ? Fallback(it->second) : for_device(ordinal);
  }
  // For a process that knows the GPU only by UUID (an NVML monitor): NAME_<n> cannot apply.
  Fallback for_gpu(std::string_view uuid) const {
    const auto it = by_uuid.find(uuid);
    return it != by_uuid.end() ? Fallback(it->second) : every_device;
  }
  bool set_for_device(int ordinal, std::string_view uuid) const {
    return by_uuid.find(uuid) != by_uuid.end() || by_device.contains(ordinal);
  }
  bool operator==(const PerDevice&) const = default;
};

// ---- Config's members, declared from the table (variables.inc) ---------------------------------

// The type a variable's value parses to (config.cpp's parse_as), and the type that holds it where
// the variable may be unset with no value at all (a memory cap: std::nullopt is "no cap").
template <VariableKind K>
struct KindTypes;
template <>
struct KindTypes<VariableKind::quantity> {
  using value = MemoryLimit;
  using held = std::optional<MemoryLimit>;
};
template <>
struct KindTypes<VariableKind::percent> {
  using value = unsigned;
  using held = unsigned;
};
template <>
struct KindTypes<VariableKind::priority> {
  using value = Priority;
  using held = Priority;
};
template <>
struct KindTypes<VariableKind::tenant_name> {
  using value = std::string;
  using held = std::string;
};
template <>
struct KindTypes<VariableKind::directory> {
  using value = std::string;
  using held = std::string;
};
template <>
struct KindTypes<VariableKind::log_level> {
  using value = LogLevel;
  using held = LogLevel;
};
template <>
struct KindTypes<VariableKind::file> {
  using value = std::string;
  using held = std::string;
};
template <>
struct KindTypes<VariableKind::flag> {
  using value = bool;
  using held = bool;
};

template <VariableKind K, DeviceScope S>
using ConfigField = std::conditional_t<S == DeviceScope::per_device,
                                       PerDevice<typename KindTypes<K>::value, typename KindTypes<K>::held>,
                                       typename KindTypes<K>::held>;

// A member's initial value from the table's DEFAULT: for a per-device member, its every-device value.
template <typename Field, typename Default>
Field initial_value(const Default& value) {
  if constexpr (requires(Field f) { f.every_device; }) {
    Field field;
    field.every_device = value;
    return field;
  } else {
    return Field(value);
  }
}

// Whether a DEFAULT is "nothing" (and so needs the table's UNSET words to say what holds).
constexpr bool is_empty_default(std::nullopt_t) { return true; }
constexpr bool is_empty_default(const char* text) { return text[0] == '\0'; }
template <typename T>
constexpr bool is_empty_default(T) {
  return false;
}

#define SLICE_VARIABLE(NAME, FIELD, KIND, DEVICES, DEFAULT, UNSET, EXAMPLE, HELP) \
  static_assert(is_empty_default(DEFAULT) == !std::string_view(UNSET).empty(),    \
                #NAME ": UNSET says what an empty DEFAULT means, and is \"\" for any other DEFAULT");
#include "variables.inc"

// One member per row of variables.inc, named by its FIELD column and in table order, initialised to
// its DEFAULT: the table is the one place a default is written.
struct Config {
#define SLICE_VARIABLE(NAME, FIELD, KIND, DEVICES, DEFAULT, UNSET, EXAMPLE, HELP) \
  ConfigField<VariableKind::KIND, DeviceScope::DEVICES> FIELD =                   \
      initial_value<ConfigField<VariableKind::KIND, DeviceScope::DEVICES>>(DEFAULT);
#include "variables.inc"

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
  // Variables left out, and why (secure execution): one line for the log.
  std::string notice;

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
// `secure`: the process runs in secure-execution mode (setuid or setgid, file capabilities:
// AT_SECURE), where its environment is its caller's, not its owner's: the variables that name a
// place libslice creates, writes or trusts (SLICE_COORDINATOR_DIR, SLICE_POLICY_DIR, SLICE_LOG_FILE)
// are left out, their defaults hold, and `notice` says so (issue 29: a user's SLICE_LOG_FILE made a
// setuid-root program append to a root-owned file).
ConfigResult parse_config(const Environment& env, bool secure = false);

// Whether this process runs in secure-execution mode (getauxval(AT_SECURE)).
bool secure_execution();

}  // namespace slice
