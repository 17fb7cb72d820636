// How limits read in messages, tables and policy files.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "quantity.h"

namespace slice {

std::string describe_bytes(std::uint64_t bytes);  // "4.0 GiB", "512.0 MiB", "none" for kNoLimit
// "4Gi", "1073741824", "25%": a form parse_memory_limit reads back to the same limit; "none".
std::string limit_text(const std::optional<MemoryLimit>& limit);
// The cap on a device of `device_total` bytes; kNoLimit when there is none.
std::uint64_t cap_on(const std::optional<MemoryLimit>& limit, std::uint64_t device_total);

}  // namespace slice
