// slicectl's help texts: the whole command and each subcommand.
#pragma once

#include <string_view>

namespace slicectl {

extern const char* const kMainUsage;
extern const char* const kStatusUsage;
extern const char* const kSetUsage;
extern const char* const kGcUsage;
extern const char* const kUsageReportUsage;
extern const char* const kRmUsage;
extern const char* const kTopUsage;
extern const char* const kMetricsUsage;

// The usage text of a subcommand by name; kMainUsage for any other name.
const char* usage_of(std::string_view subcommand);

}  // namespace slicectl
