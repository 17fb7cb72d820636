// cuGetProcAddress on a driver newer than libslice (tests/shim/future_driver.cpp stands in for it):
// the caller gets libslice's wrapper only where the driver's answer is the very function that
// wrapper wraps (or another hooked export, whose wrapper it then gets); an ABI libslice does not
// know passes through unhooked, with one warning, instead of being replaced by a wrapper that
// reads another argument layout.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using GetProcAddress = int (*)(const char*, void**, int, unsigned long long, int*);

struct Libraries {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);           // the stand-in, from LD_LIBRARY_PATH
  void* slice = dlopen(std::getenv("LIBSLICE"), RTLD_NOW | RTLD_NOLOAD);  // preloaded
};

void* lookup(GetProcAddress get, const char* name, int version) {
  void* fn = nullptr;
  int status = -1;
  EXPECT_EQ(get(name, &fn, version, 0, &status), 0) << name;
  return fn;
}

TEST(ProcAddrFuture, OnlyTheAbiTheDriverAnsweredIsWrapped) {
  const std::string log_path = std::string(std::getenv("SLICE_TEST_TMPDIR")) + "/slice.log";
  setenv("SLICE_LOG_FILE", log_path.c_str(), 1);  // read at libslice's first look at its variables, below
  Libraries lib;
  ASSERT_NE(lib.driver, nullptr) << dlerror();
  ASSERT_NE(lib.slice, nullptr) << dlerror();
  // Through the dlsym hook, as the runtime finds it: libslice's wrapper of cuGetProcAddress_v2.
  const auto get = reinterpret_cast<GetProcAddress>(dlsym(lib.driver, "cuGetProcAddress_v2"));
  ASSERT_EQ(reinterpret_cast<void*>(get), dlsym(lib.slice, "cuGetProcAddress_v2"));

  // The ABI libslice knows: its wrapper.
  EXPECT_EQ(lookup(get, "cuMemAlloc", 12000), dlsym(lib.slice, "cuMemAlloc_v2"));
  // A newer ABI: the driver's own function, not the _v2 wrapper (which would misread its arguments).
  EXPECT_EQ(lookup(get, "cuMemAlloc", 14000), dlsym(lib.driver, "cuMemAlloc_v3"));
  // The driver answered the old 32-bit export where the table says _v2: the wrapper of what it answered.
  EXPECT_EQ(lookup(get, "cuMemFree", 3020), dlsym(lib.slice, "cuMemFree"));

  // One warning for the unknown ABI, however often it is asked for.
  lookup(get, "cuMemAlloc", 14000);
  std::ifstream in(log_path);
  std::stringstream log;
  log << in.rdbuf();
  std::size_t warnings = 0;
  for (std::size_t at = 0; (at = log.str().find("libslice does not know", at)) != std::string::npos; ++at) ++warnings;
  EXPECT_EQ(warnings, 1u) << log.str();
}

}  // namespace
