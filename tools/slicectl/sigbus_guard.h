// For subcommands that write a tenant's file through a shared mapping (gc, rm): the tenant's own
// user may truncate that file meanwhile, and touching the mapping then raises SIGBUS. The guard
// turns that into a failure to report instead of a crash (our locks go with the process anyway).
#pragma once

#include <functional>

namespace slicectl {

// Runs `body` with SIGBUS caught; false if it was raised (then `body` did not finish). The
// previous SIGBUS action is restored either way.
bool run_without_sigbus(const std::function<void()>& body);

}  // namespace slicectl
