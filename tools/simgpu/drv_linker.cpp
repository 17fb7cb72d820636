// SIMGPU_CALL_THROUGH_LINKER (driver.h, SIM_EXPORT_CALL): the driver's calls of its own exports
// through the dynamic linker's global scope, for tests of a library preloaded in front of it.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "driver.h"

namespace simgpu {

void* export_through_the_linker(const char* name) {
  static const bool on = [] {
    const char* v = std::getenv("SIMGPU_CALL_THROUGH_LINKER");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on ? dlsym(RTLD_DEFAULT, name) : nullptr;
}

}  // namespace simgpu
