// Every ABI of a hooked function is hooked: where cuGetProcAddress (or dlsym of an old name) can
// hand out several exports for one name (cuCtxCreate at 2000 is cuCtxCreate, at 3020 _v2...), a
// hook on one of them and not the others would let the old ABI past the caps. Checked against the
// generated cuGetProcAddress table, so a toolkit upgrade that adds an ABI fails here until it is
// hooked.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "hook_names.h"

namespace {

std::map<std::string, std::set<std::string>> exports_by_name() {
  std::map<std::string, std::set<std::string>> m;
#define SLICE_PROCADDR_ENTRY(name, version, per_thread, export) m[name].insert(#export);
#include "procaddr_table.inc"
#undef SLICE_PROCADDR_ENTRY
  return m;
}

TEST(HookCoverage, AllAbisOfAHookedFunctionAreHooked) {
  const std::set<std::string>& hooked = hooked_cuda_exports();
  int names_checked = 0;
  for (const auto& [name, exports] : exports_by_name()) {
    bool any = false;
    for (const std::string& e : exports) any |= hooked.contains(e);
    if (!any) continue;
    ++names_checked;
    for (const std::string& e : exports) EXPECT_TRUE(hooked.contains(e)) << name << ": " << e << " is not hooked";
  }
  EXPECT_GT(names_checked, 40);
}

}  // namespace
