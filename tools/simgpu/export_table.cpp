// Name -> address of every driver export of the simulator, for cuGetProcAddress. Driven by the same
// generated list as the stubs, so a symbol the table can hand out always exists. No cuda.h here.
#include <cstring>
#include <string_view>
#include <unordered_map>

#define SLICE_DRIVER_EXPORT(sym) extern "C" int sym();
#include "driver_exports.inc"
#undef SLICE_DRIVER_EXPORT

namespace simgpu {

void* export_address(std::string_view name) {
  static const std::unordered_map<std::string_view, void*> table = {
#define SLICE_DRIVER_EXPORT(sym) {#sym, reinterpret_cast<void*>(&sym)},
#include "driver_exports.inc"
#undef SLICE_DRIVER_EXPORT
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

}  // namespace simgpu
