// What slicectl top shows of a coordinator, laid out for a window `columns` wide: per GPU a bar of
// its memory by tenant and a bar of its time by tenant (received over the last second), then per
// tenant its live processes, memory used / cap, compute share and the share it received. Each
// tenant keeps one letter and one colour on every GPU.
#pragma once

#include <cstddef>
#include <vector>

#include "screen_lines.h"
#include "status_model.h"

namespace slicectl {

std::vector<ScreenLine> top_view(const CoordinatorStatus& status, std::size_t columns);

}  // namespace slicectl
