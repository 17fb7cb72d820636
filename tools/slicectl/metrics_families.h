// slicectl metrics: what a coordinator holds (status_model.h's picture, the same figures as
// slicectl status --json) as Prometheus metric families.
#pragma once

#include <string>

#include "status_model.h"

namespace slicectl {

// The whole exposition, # HELP and # TYPE lines for every family even when it has no sample.
std::string metrics_text(const CoordinatorStatus& status);

}  // namespace slicectl
