// The times of `slicectl usage`: parsing its --since TIME (a UTC date or date and time, or a
// duration back from now) and writing the times of its report (UTC, ISO 8601).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "parse_result.h"

namespace slice {

// TIME as wall-clock milliseconds since the epoch, given the time now:
//   2026-11-30, 2026-11-30T14:00, 2026-11-30T14:00:30 (also with a space for T), in UTC, with an
//   optional Z or UTC after it; or N followed by s, m, h, d or w: that long before now (90m, 24h, 7d).
// Refuses a time in the future, or before 1970.
ParseResult<std::uint64_t> parse_since(std::string_view text, std::uint64_t now_ms);

// "2026-11-30T14:00:00Z" (to the second, rounded down).
std::string utc_text(std::uint64_t wall_ms);

}  // namespace slice
