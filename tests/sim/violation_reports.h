// For the tests that break the simulated driver's rules on purpose (SIMGPU_VIOLATIONS_EXPECTED=1):
// what the simulator reported to the file SIMGPU_VIOLATIONS names, read back by the test itself.
#pragma once

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace simgpu_test {

// The violations reported since the last call, and the file emptied.
inline std::string take_reports() {
  const char* path = std::getenv("SIMGPU_VIOLATIONS");
  if (path == nullptr) return {};
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  std::ofstream(path, std::ios::trunc);
  return s.str();
}

}  // namespace simgpu_test
