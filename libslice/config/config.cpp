#include "config.h"

#include <sys/auxv.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "printable.h"
#include "variables.h"

namespace slice {
namespace {

constexpr std::string_view kPrefix = "SLICE_";
constexpr std::string_view kGpuSuffixPrefix = "GPU_";  // NAME_GPU_<uuid>

// ---- values: each VariableKind to its parser, each parsed value into its Config field ----------

template <VariableKind K>
auto parse_as(std::string_view text) {
  if constexpr (K == VariableKind::quantity)
    return parse_memory_limit(text);
  else if constexpr (K == VariableKind::percent)
    return parse_percent(text);
  else if constexpr (K == VariableKind::priority)
    return parse_priority(text);
  else if constexpr (K == VariableKind::tenant_name)
    return parse_tenant_name(text);
  else if constexpr (K == VariableKind::directory)
    return parse_directory(text);
  else if constexpr (K == VariableKind::log_level)
    return parse_log_level(text);
  else if constexpr (K == VariableKind::file)
    return parse_file(text);
  else if constexpr (K == VariableKind::flag)
    return parse_flag(text);
}

// Which device a variable's name sets: none (every device), an ordinal (NAME_<n>) or a UUID
// (NAME_GPU_<uuid>).
struct DeviceKey {
  std::optional<int> ordinal;
  std::string uuid;  // canonical "GPU-…"; empty: not the UUID form
};

template <typename T>
void store(T& field, const DeviceKey& /*device: none for a process-wide field*/, T value) {
  field = std::move(value);
}

template <typename T, typename Fallback>
void store(PerDevice<T, Fallback>& field, const DeviceKey& device, T value) {
  if (!device.uuid.empty()) {
    field.by_uuid[device.uuid] = std::move(value);
  } else if (device.ordinal) {
    field.by_device[*device.ordinal] = std::move(value);
  } else {
    field.every_device = std::move(value);
  }
}

// Parses value as the variable's kind into its field; the reason when it is not valid.
std::optional<std::string> apply(Config& config, VariableId id, const DeviceKey& device, std::string_view value) {
  switch (id) {
#define SLICE_VARIABLE(NAME, FIELD, KIND, DEVICES, DEFAULT, UNSET, EXAMPLE, HELP) \
  case VariableId::NAME: {                                                        \
    auto parsed = parse_as<VariableKind::KIND>(value);                            \
    if (!parsed) return std::move(parsed.reason);                                 \
    store(config.FIELD, device, std::move(*parsed.value));                        \
    return std::nullopt;                                                          \
  }
#include "variables.inc"
  }
  return "not a libslice variable";
}

// ---- names: which row, and which device, a SLICE_* name means ----------------------------------

std::string setting(std::string_view name, std::string_view value) {
  return std::string(name) + "=" + std::string(value);
}

std::string device_variable(const VariableInfo& info, int device) {
  return std::string(info.name) + "_" + std::to_string(device);
}

// A device ordinal as written in a suffix: decimal, no sign, no leading zero, 0..kMaxDeviceOrdinal.
std::optional<int> parse_ordinal(std::string_view digits) {
  if (digits.empty() || digits.size() > 3) return std::nullopt;
  if (digits.size() > 1 && digits.front() == '0') return std::nullopt;
  int n = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    n = n * 10 + (c - '0');
  }
  return n <= kMaxDeviceOrdinal ? std::optional<int>(n) : std::nullopt;
}

// Levenshtein distance, to suggest the variable a typo meant.
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

const VariableInfo& closest_variable(std::string_view name) {
  // Past this length a name is no typo of ours, and the quadratic distance is not worth it.
  constexpr std::size_t kLongestTypo = 64;
  const VariableInfo* best = &kSliceVariables[0];
  std::size_t best_distance = SIZE_MAX;
  for (const VariableInfo& v : kSliceVariables) {
    const std::size_t d = name.size() <= kLongestTypo ? edit_distance(name, v.name) : SIZE_MAX;
    if (d < best_distance) {
      best = &v;
      best_distance = d;
    }
  }
  return *best;
}

struct NameMatch {
  const VariableInfo* info = nullptr;  // nullptr: a name the table says to ignore
  DeviceKey device;                    // NAME_<n>, NAME_GPU_<uuid>
  std::optional<ConfigError> error;    // the name itself is wrong
};

NameMatch match_name(const std::string& name, const std::string& value) {
  if (const VariableInfo* info = find_variable(name)) return {info, {}, std::nullopt};
  if (is_ignored_variable(name)) return {};

  // NAME_<suffix>: the longest table name that, with '_', starts this one.
  const VariableInfo* stem = nullptr;
  for (const VariableInfo& v : kSliceVariables) {
    if (name.size() > v.name.size() && name.starts_with(v.name) && name[v.name.size()] == '_' &&
        (stem == nullptr || v.name.size() > stem->name.size())) {
      stem = &v;
    }
  }
  if (stem != nullptr) {
    const std::string_view suffix = std::string_view(name).substr(stem->name.size() + 1);
    if (stem->scope == DeviceScope::process_wide) {
      return {nullptr,
              {},
              ConfigError{name, value, std::string(stem->name) + " has no per-device form",
                          setting(stem->name, stem->example)}};
    }
    if (suffix.starts_with(kGpuSuffixPrefix)) {
      auto uuid = gpu_uuid_of_suffix(suffix);
      if (!uuid) {
        return {
            nullptr,
            {},
            ConfigError{name, value,
                        "the suffix '" + printable(suffix, 48) +
                            "' is not a GPU UUID (GPU_ and 32 hex digits in groups of 8_4_4_4_12)",
                        setting(std::string(stem->name) + "_GPU_516d696d_6770_4075_8000_000000000000", stem->example)}};
      }
      return {stem, DeviceKey{std::nullopt, std::move(*uuid)}, std::nullopt};
    }
    const auto device = parse_ordinal(suffix);
    if (!device) {
      return {nullptr,
              {},
              ConfigError{name, value,
                          "the suffix '" + printable(suffix, 16) + "' is not a device ordinal (0 to " +
                              std::to_string(kMaxDeviceOrdinal) + ", no leading zeros)",
                          setting(device_variable(*stem, 0), stem->example)}};
    }
    return {stem, DeviceKey{device, {}}, std::nullopt};
  }

  const VariableInfo& closest = closest_variable(name);
  return {nullptr,
          {},
          ConfigError{name, value, "unknown variable (did you mean " + std::string(closest.name) + "?)",
                      setting(closest.name, closest.example)}};
}

ConfigResult failure(ConfigError error) { return ConfigResult{std::nullopt, std::move(error), {}}; }

ConfigError value_error(const VariableInfo& info, const DeviceKey& device, const std::string& value,
                        std::string reason) {
  std::string name = device.ordinal ? device_variable(info, *device.ordinal) : std::string(info.name);
  if (!device.uuid.empty()) name = std::string(info.name) + "_" + gpu_uuid_suffix(device.uuid);
  return ConfigError{name, value, std::move(reason), setting(name, info.example)};
}

}  // namespace

std::string ConfigError::message() const {
  return printable(variable) + "='" + printable(value) + "' is not valid: " + reason + "; example: " + example;
}

Environment slice_environment(const char* const* envp) {
  Environment env;
  for (; envp != nullptr && *envp != nullptr; ++envp) {
    const std::string_view entry(*envp);
    const auto equals = entry.find('=');
    if (equals == std::string_view::npos || !entry.starts_with(kPrefix)) continue;
    env.emplace(entry.substr(0, equals), entry.substr(equals + 1));  // keeps the first of a name
  }
  return env;
}

Environment process_slice_environment() { return slice_environment(environ); }

bool secure_execution() { return getauxval(AT_SECURE) != 0; }

ConfigResult parse_config(const Environment& env, bool secure) {
  Config config;
  std::string left_out;
  const VariableInfo& disable = variable_info(VariableId::SLICE_DISABLE);
  if (const auto it = env.find(disable.name); it != env.end()) {
    const auto flag = parse_flag(it->second);
    if (!flag) return failure(value_error(disable, {}, it->second, flag.reason));
    if (*flag.value) {
      config.disable = true;
      return ConfigResult{config, {}, {}};
    }
  }

  for (const auto& [name, value] : env) {
    if (!name.starts_with(kPrefix)) continue;
    NameMatch match = match_name(name, value);
    if (match.error) return failure(std::move(*match.error));
    if (match.info == nullptr) continue;
    if (secure && (match.info == &variable_info(VariableId::SLICE_COORDINATOR_DIR) ||
                   match.info == &variable_info(VariableId::SLICE_POLICY_DIR) ||
                   match.info == &variable_info(VariableId::SLICE_LOG_FILE))) {
      left_out += (left_out.empty() ? "" : ", ") + std::string(match.info->name);
      continue;
    }
    // An empty flag is unset: its default holds (SLICE_CRASH_HANDLER= keeps the handler off).
    if (match.info->kind == VariableKind::flag && value.empty()) continue;
    const auto id = static_cast<VariableId>(match.info - kSliceVariables);
    if (auto reason = apply(config, id, match.device, value)) {
      return failure(value_error(*match.info, match.device, value, std::move(*reason)));
    }
  }
  ConfigResult result{config, {}, {}};
  if (!left_out.empty())
    result.notice =
        "secure execution (a setuid, setgid or capability program): " + left_out + " ignored, the defaults hold";
  return result;
}

}  // namespace slice
