// The SLICE_* variables as data: variables.inc turned into a constant array that parsing and the
// documentation read. Header-only and constexpr: nothing runs at load time.
#pragma once

#include <string_view>

#include "config_values.h"  // the default folders the table names

namespace slice {

// How a variable's value is parsed (config.cpp maps each kind to its parser).
enum class VariableKind {
  quantity,     // a memory cap: bytes, Ki/Mi/Gi…, K/M/G…, or a percentage of the device (quantity.h)
  percent,      // a whole percent, 1–100
  priority,     // high, normal, low
  tenant_name,  // a name that becomes a file name
  directory,    // an absolute path
  log_level,    // off, error, warn, info, debug, trace
  file,         // a path
  flag,         // 1/0, true/false, yes/no; empty is unset
};

// Whether the per-device forms exist: NAME_<n> (an ordinal) and NAME_GPU_<uuid>.
enum class DeviceScope { process_wide, per_device };

struct VariableInfo {
  std::string_view name;   // SLICE_MEMORY_LIMIT
  std::string_view field;  // the slice::Config member it sets
  VariableKind kind;
  DeviceScope scope;
  std::string_view unset_text;  // markdown: what an empty default means ("" where the default is a value)
  std::string_view example;     // a valid value
  std::string_view help;        // markdown
};

// One enumerator per variable, in table order, so code can name a row without a string compare.
enum class VariableId {
#define SLICE_VARIABLE(NAME, FIELD, KIND, DEVICES, DEFAULT, UNSET, EXAMPLE, HELP) NAME,
#include "variables.inc"
};

inline constexpr VariableInfo kSliceVariables[] = {
#define SLICE_VARIABLE(NAME, FIELD, KIND, DEVICES, DEFAULT, UNSET, EXAMPLE, HELP) \
  {#NAME, #FIELD, VariableKind::KIND, DeviceScope::DEVICES, UNSET, EXAMPLE, HELP},
#include "variables.inc"
};

// (An array cannot be empty: keep at least one SLICE_IGNORED_VARIABLE row, or make this a std::array.)
inline constexpr std::string_view kIgnoredSliceVariables[] = {
#define SLICE_VARIABLE(NAME, FIELD, KIND, DEVICES, DEFAULT, UNSET, EXAMPLE, HELP)
#define SLICE_IGNORED_VARIABLE(NAME, WHY) #NAME,
#include "variables.inc"
};

constexpr const VariableInfo& variable_info(VariableId id) { return kSliceVariables[static_cast<int>(id)]; }

// The row of exactly this name (no _<n> suffix), or nullptr.
constexpr const VariableInfo* find_variable(std::string_view name) {
  for (const VariableInfo& v : kSliceVariables) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

constexpr bool is_ignored_variable(std::string_view name) {
  for (const std::string_view ignored : kIgnoredSliceVariables) {
    if (ignored == name) return true;
  }
  return false;
}

}  // namespace slice
