// Calls the real driver punishes or leaves undefined: a query of a capturing stream, a "potentially
// unsafe" call during another thread's global capture, a use of a destroyed handle. The simulator
// answers them as the driver documents (an error, an invalidated capture) and also reports each one,
// because the real driver would not say why a capture failed or a handle misbehaved:
//   SIMGPU_VIOLATIONS=FILE   each report is appended to FILE as one line (the tests' wrapper sets it
//                            and fails a test that leaves a line there);
//   always                   the same line on standard error.
#pragma once

#include <string>

namespace simgpu {

// `function`: the driver entry point that was called; `what`: the rule it broke. Thread-safe, and
// safe with the driver's lock held.
void report_violation(const char* function, const std::string& what);

}  // namespace simgpu
