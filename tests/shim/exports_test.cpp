// libslice.so's hygiene, checked on the built file: its dynamic exports are exactly the hook list,
// dlsym, dlopen and the public list; it needs only glibc and libstdc++/libgcc; nothing of ours runs
// at load.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "hook_names.h"

namespace {

const std::set<std::string> kPublicList = {"slice_version", "slice_get_info"};  // include/slice/slice.h

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(pipe), 0) << command;
  return out;
}

// name -> version ("" when unversioned) of every defined dynamic symbol except version definitions.
std::map<std::string, std::string> dynamic_exports() {
  std::map<std::string, std::string> exports;
  std::istringstream lines(run("nm -D --defined-only " SLICE_SHIM_PATH));
  std::string address, type, symbol;
  while (lines >> address >> type >> symbol) {
    if (type == "A") continue;  // the version node itself (LIBSLICE_0.1)
    const auto at = symbol.find('@');
    exports[symbol.substr(0, at)] = at == std::string::npos ? "" : symbol.substr(symbol.find_last_of('@') + 1);
  }
  return exports;
}

TEST(ShimExports, ExactlyTheHookListDlsymDlopenAndThePublicList) {
  std::set<std::string> expected = hooked_cuda_exports();
  expected.insert(hooked_nvml_exports().begin(), hooked_nvml_exports().end());
  expected.insert("dlsym");
  expected.insert("dlopen");  // clears RTLD_DEEPBIND (shim/dlopen_hook.cpp)
  expected.insert(kPublicList.begin(), kPublicList.end());
  std::set<std::string> actual;
  for (const auto& [name, version] : dynamic_exports()) actual.insert(name);
  EXPECT_EQ(actual, expected);
}

TEST(ShimExports, HooksDlsymAndDlopenUnversionedPublicListVersioned) {
  // A versioned hook would not bind to an application's dlsym@GLIBC_2.34, dlopen@GLIBC_2.34 or
  // cuMemAlloc_v2.
  for (const auto& [name, version] : dynamic_exports()) {
    if (kPublicList.contains(name)) {
      EXPECT_EQ(version, "LIBSLICE_0.1") << name;
    } else {
      EXPECT_EQ(version, "") << name;
    }
  }
}

TEST(ShimExports, EveryListedHookResolvesInTheLibraryAndEveryExportedHookIsListed) {
  void* lib = dlopen(SLICE_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  for (const auto* list : {&hooked_cuda_exports(), &hooked_nvml_exports()}) {
    for (const std::string& name : *list) {
      void* sym = dlsym(lib, name.c_str());
      ASSERT_NE(sym, nullptr) << name;
      Dl_info info{};
      ASSERT_NE(dladdr(sym, &info), 0);
      EXPECT_STREQ(info.dli_sname, name.c_str());
      EXPECT_NE(std::string(info.dli_fname).find("libslice.so"), std::string::npos) << name;
    }
  }
  for (const auto& [name, version] : dynamic_exports()) {
    if (name.starts_with("cu")) {
      EXPECT_TRUE(hooked_cuda_exports().contains(name)) << name;
    }
    if (name.starts_with("nvml")) {
      EXPECT_TRUE(hooked_nvml_exports().contains(name)) << name;
    }
  }
}

TEST(ShimExports, NeedsOnlyGlibc) {
  // The C++ runtime is linked in and hidden (-static-libstdc++ -static-libgcc): a program that
  // carries its own libstdc++.so.6 must find only its own (issue 25; shim_newer_cxx_preloaded).
  const std::set<std::string> allowed = {"libc.so.6",
                                         "libm.so.6",
                                         "libdl.so.2",
                                         "libpthread.so.0",
                                         "librt.so.1",
                                         "ld-linux-x86-64.so.2",
                                         "ld-linux-aarch64.so.1"};
  std::istringstream lines(run("readelf -d " SLICE_SHIM_PATH));
  std::string line;
  int needed = 0;
  while (std::getline(lines, line)) {
    if (line.find("(NEEDED)") == std::string::npos) continue;
    const auto open = line.find('['), close = line.find(']');
    ASSERT_NE(open, std::string::npos);
    const std::string lib = line.substr(open + 1, close - open - 1);
    EXPECT_TRUE(allowed.contains(lib)) << lib;
    ++needed;
  }
  EXPECT_GT(needed, 0);
}

TEST(ShimExports, NoStaticConstructorsOfOurs) {
  // Start-up is lazy: nothing of libslice's own runs at load. What runs is the C++ runtime's own
  // initialisation, as it ran in libstdc++.so.6 when libslice brought that into every process: its
  // exception emergency pool, locale ids, error categories (objects of libstdc++.a, named *.cc).
  const std::set<std::string> runtime = {"eh_alloc.cc",          "locale_inst.cc",        "wlocale_inst.cc",
                                         "cxx11_locale_inst.cc", "cxx11_wlocale_inst.cc", "system_error.cc",
                                         "cxx11_ios_failure.cc", "ios_init.cc",           "globals_io.cc"};
  std::istringstream symbols(run("nm " SLICE_SHIM_PATH));
  std::string address, type, symbol;
  while (symbols >> address >> type >> symbol) {
    EXPECT_EQ(symbol.find("constructor"), std::string::npos) << symbol;
    if (!symbol.starts_with("_GLOBAL__sub_I_")) continue;
    EXPECT_TRUE(runtime.contains(symbol.substr(15))) << "a load-time initialiser of libslice's own: " << symbol;
  }
}

}  // namespace

namespace {

// No driver installed: libslice's wrappers answer as the absent library would (shim/hooks.cpp).
TEST(ShimWithoutDriver, WrappersAnswerAsAnAbsentDriver) {
  if (void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD | RTLD_LOCAL);
      cuda != nullptr || (cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) != nullptr) {
    dlclose(cuda);
    GTEST_SKIP() << "a libcuda.so.1 is installed here";
  }
  void* lib = dlopen(SLICE_SHIM_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  auto cu_init = reinterpret_cast<int (*)(unsigned)>(dlsym(lib, "cuInit"));
  auto cu_alloc = reinterpret_cast<int (*)(unsigned long long*, size_t)>(dlsym(lib, "cuMemAlloc_v2"));
  auto get_proc =
      reinterpret_cast<int (*)(const char*, void**, int, unsigned long long, int*)>(dlsym(lib, "cuGetProcAddress_v2"));
  auto nvml_init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
  auto nvml_mem = reinterpret_cast<int (*)(void*, void*)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
  ASSERT_TRUE(cu_init && cu_alloc && get_proc && nvml_init && nvml_mem);
  constexpr int kCudaErrorNotInitialized = 3, kNvmlErrorUninitialized = 1, kNvmlErrorLibraryNotFound = 12;
  EXPECT_EQ(cu_init(0), kCudaErrorNotInitialized);
  unsigned long long ptr = 0;
  EXPECT_EQ(cu_alloc(&ptr, 1024), kCudaErrorNotInitialized);
  void* pfn = nullptr;
  EXPECT_EQ(get_proc("cuMemAlloc", &pfn, 3020, 0, nullptr), kCudaErrorNotInitialized);
  EXPECT_EQ(pfn, nullptr);
  EXPECT_EQ(nvml_init(), kNvmlErrorLibraryNotFound);
  EXPECT_EQ(nvml_mem(nullptr, nullptr), kNvmlErrorUninitialized);
}

}  // namespace
