// Memory quantities and percentages as users write them in SLICE_* variables and tool options.
//
// Accepted memory forms (case matters, as in Kubernetes):
//   bytes             1073741824
//   binary units      Ki Mi Gi Ti Pi Ei and KiB MiB GiB TiB PiB EiB (powers of 1024)
//   decimal units     k K M G T P E and KB MB GB TB PB EB (powers of 1000)
//   decimals          1.5Gi = 1610612736 (rounded down to whole bytes; at most 18 digits after the point)
//   device fraction   25%, 12.5% (0 < p <= 100, at most 7 digits after the point), resolved later
//                     against the device's size
// Refused: empty, whitespace anywhere, signs, hex, exponents (1e9), more than one point, unknown
// units, and anything past 2^64-1 bytes. Overflow is found exactly, with integer arithmetic only:
// a cap that silently wrapped or rounded would be a different cap.
#pragma once

#include <cstdint>
#include <string_view>

#include "parse_result.h"

namespace slice {

// A VRAM cap: a number of bytes, or a fraction of whatever device it is applied to.
struct MemoryLimit {
  static constexpr std::uint32_t kWholeDevice = 1'000'000'000;  // device_billionths of 100%

  enum class Form { bytes, device_fraction };
  Form form = Form::bytes;
  std::uint64_t bytes = 0;              // Form::bytes: the cap, > 0
  std::uint32_t device_billionths = 0;  // Form::device_fraction: 1..kWholeDevice (25% = 250'000'000)

  static MemoryLimit of_bytes(std::uint64_t n) { return {Form::bytes, n, 0}; }
  static MemoryLimit of_device_billionths(std::uint32_t b) { return {Form::device_fraction, 0, b}; }

  // The cap in bytes on a device of device_total_bytes; a fraction rounds down.
  std::uint64_t bytes_on(std::uint64_t device_total_bytes) const;

  bool operator==(const MemoryLimit&) const = default;
};

// A memory quantity in bytes (0 allowed); no percentage. For sizes that are not caps.
ParseResult<std::uint64_t> parse_byte_quantity(std::string_view text);

// A VRAM cap: a byte quantity of at least 1 byte, or a percentage of the device. A cap of 0 is
// refused because other tools read 0 as "no cap"; no cap is an unset variable.
ParseResult<MemoryLimit> parse_memory_limit(std::string_view text);

// A whole percent from 1 to 100, with or without a trailing '%' (compute shares and limits).
ParseResult<unsigned> parse_percent(std::string_view text);

}  // namespace slice
