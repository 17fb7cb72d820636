// The hooked export names, straight from shim/hooked_functions.inc, for the tests.
#pragma once

#include <set>
#include <string>

inline const std::set<std::string>& hooked_cuda_exports() {
  static const std::set<std::string> names = {
#define SLICE_HOOK_CU(name, ret, params, args) #name,
#define SLICE_HOOK_NVML(name, ret, params, args)
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_NVML
  };
  return names;
}

inline const std::set<std::string>& hooked_nvml_exports() {
  static const std::set<std::string> names = {
#define SLICE_HOOK_CU(name, ret, params, args)
#define SLICE_HOOK_NVML(name, ret, params, args) #name,
#include "hooked_functions.inc"
#undef SLICE_HOOK_CU
#undef SLICE_HOOK_NVML
  };
  return names;
}
