// The simulated driver and NVML keep their per-thread state in pthread keys, as the real libcuda and
// libnvidia-ml do, and report a key that another C library overwrote (tools/simgpu/thread_keys.h):
// the keys are made when each library is loaded; the state round-trips on every thread, across
// thread exits and a fork, without a report; a foreign value, NULL where a record was stored, or a
// value where none was is reported by the next call that reads the key, naming the call and the key;
// and the bug that crashed every Python program on a real GPU (issue 22): a copy of NVML loaded with
// dlmopen(LM_ID_NEWLM) brings a second C library, whose keys write the driver's slots, and the next
// context creation must report it.
//
// Linked with the simulated libcuda.so.1 only, so that the driver's keys are the process's first and
// a second libc's keys, numbered from 0 too, fall on them; NVML is dlopen'ed. Breaks the rule on
// purpose and reads the reports itself (SIMGPU_VIOLATIONS_EXPECTED=1).
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "nvml_subset.h"
#include "violation_reports.h"

namespace {

#define CU(call) ASSERT_EQ(CUDA_SUCCESS, (call)) << #call

const char kNvmlPath[] = SIMGPU_LIB_DIR "/libnvidia-ml.so.1";
constexpr pthread_key_t kScannedKeys = 128;
constexpr pthread_key_t kNoKey = ~pthread_key_t{0};

// Made while this program starts, after the libraries it is linked with were loaded: their
// constructors ran first, so the keys they made at load have lower numbers.
const pthread_key_t g_key_after_load = [] {
  pthread_key_t key = kNoKey;
  pthread_key_create(&key, nullptr);
  return key;
}();

using simgpu_test::take_reports;

std::string pointer(const void* p) {
  char text[32];
  std::snprintf(text, sizeof text, "%p", p);
  return text;
}

// This thread's keys that hold a value, as this program's C library reads them.
std::map<pthread_key_t, void*> keys_set() {
  std::map<pthread_key_t, void*> set;
  for (pthread_key_t k = 0; k < kScannedKeys; ++k)
    if (void* v = pthread_getspecific(k)) set[k] = v;
  return set;
}

// The one key that `call` sets on a new thread (kNoKey if none or several).
template <class Call>
pthread_key_t key_set_by(Call call) {
  pthread_key_t key = kNoKey;
  std::thread([&] {
    const auto before = keys_set();
    if (!call()) return;
    int found = 0;
    for (const auto& [k, v] : keys_set())
      if (!before.count(k)) key = k, ++found;
    if (found != 1) key = kNoKey;
  }).join();
  return key;
}

struct Nvml {
  using Plain = nvmlReturn_t (*)();
  using Count = nvmlReturn_t (*)(unsigned int*);
  using Handle = nvmlReturn_t (*)(unsigned int, nvmlDevice_t*);
  using Processes = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*, nvmlProcessInfo_t*);
  explicit Nvml(void* lib)
      : init(reinterpret_cast<Plain>(dlsym(lib, "nvmlInit_v2"))),
        shutdown(reinterpret_cast<Plain>(dlsym(lib, "nvmlShutdown"))),
        count(reinterpret_cast<Count>(dlsym(lib, "nvmlDeviceGetCount_v2"))),
        handle(reinterpret_cast<Handle>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"))),
        processes(reinterpret_cast<Processes>(dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v3"))) {}
  bool complete() const { return init && shutdown && count && handle && processes; }
  Plain init, shutdown;
  Count count;
  Handle handle;
  Processes processes;
};

class ThreadKeys : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_EQ(CUDA_SUCCESS, cuInit(0));
    ASSERT_EQ(CUDA_SUCCESS, cuDeviceGet(&dev_, 0));
    ASSERT_EQ(CUDA_SUCCESS, cuDevicePrimaryCtxRetain(&ctx_, dev_));
    // NVML into this program's namespace, with a key made on either side of its loading.
    pthread_key_create(&before_nvml_, nullptr);
    nvml_lib_ = dlopen(kNvmlPath, RTLD_NOW | RTLD_LOCAL);
    pthread_key_create(&after_nvml_, nullptr);
    ASSERT_NE(nullptr, nvml_lib_) << dlerror();
    nvml_ = new Nvml(nvml_lib_);
    ASSERT_TRUE(nvml_->complete());
  }
  void SetUp() override {
    CU(cuCtxSetCurrent(ctx_));
    take_reports();
  }
  static CUdevice dev_;
  static CUcontext ctx_;
  static pthread_key_t before_nvml_, after_nvml_;
  static void* nvml_lib_;
  static Nvml* nvml_;
};
CUdevice ThreadKeys::dev_ = 0;
CUcontext ThreadKeys::ctx_ = nullptr;
pthread_key_t ThreadKeys::before_nvml_ = kNoKey;
pthread_key_t ThreadKeys::after_nvml_ = kNoKey;
void* ThreadKeys::nvml_lib_ = nullptr;
Nvml* ThreadKeys::nvml_ = nullptr;

TEST_F(ThreadKeys, DriverKeysAreMadeWhenTheLibraryIsLoaded) {
  const pthread_key_t key = key_set_by([&] { return cuCtxPushCurrent(ctx_) == CUDA_SUCCESS; });
  ASSERT_NE(kNoKey, key) << "a first cuCtxPushCurrent on a thread stores its context stack in one key";
  EXPECT_LT(key, g_key_after_load) << "made before this program's own start-up, so when libcuda was loaded";
  EXPECT_EQ("", take_reports());
}

TEST_F(ThreadKeys, NvmlKeysAreMadeWhenTheLibraryIsLoaded) {
  EXPECT_EQ(2u, after_nvml_ - before_nvml_ - 1) << "the simulated NVML makes two keys as it is loaded";
  const pthread_key_t key =
      key_set_by([&] { return nvml_->init() == NVML_SUCCESS && nvml_->shutdown() == NVML_SUCCESS; });
  ASSERT_NE(kNoKey, key) << "a first NVML call on a thread stores its record in one key";
  EXPECT_GT(key, before_nvml_);
  EXPECT_LT(key, after_nvml_);
  EXPECT_EQ("", take_reports());
}

TEST_F(ThreadKeys, StateRoundTripsOnEveryThreadWithoutAReport) {
  std::atomic<int> failures{0};
  const auto fail_unless = [&](bool ok) { failures += ok ? 0 : 1; };
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      CUcontext own = nullptr, current = nullptr;
      fail_unless(cuCtxCreate(&own, nullptr, 0, dev_) == CUDA_SUCCESS);  // pushed: current here only
      for (int i = 0; i < 200; ++i) {
        fail_unless(cuCtxPushCurrent(ctx_) == CUDA_SUCCESS);
        fail_unless(cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == ctx_);
        fail_unless(cuStreamSynchronize(CU_STREAM_PER_THREAD) == CUDA_SUCCESS);
        fail_unless(cuCtxPopCurrent(&current) == CUDA_SUCCESS && current == ctx_);
        fail_unless(cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == own);
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        fail_unless(cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS && mode == CU_STREAM_CAPTURE_MODE_GLOBAL);
        fail_unless(cuThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS && mode == CU_STREAM_CAPTURE_MODE_RELAXED);
        unsigned n = 0;
        fail_unless(nvml_->init() == NVML_SUCCESS && nvml_->count(&n) == NVML_SUCCESS && n == 1 &&
                    nvml_->shutdown() == NVML_SUCCESS);
      }
      fail_unless(cuCtxDestroy(own) == CUDA_SUCCESS);
      fail_unless(cuCtxGetCurrent(&current) == CUDA_SUCCESS && current == nullptr);
    });
  }
  for (auto& t : threads) t.join();  // each exit frees its records through the keys' destructors
  EXPECT_EQ(0, failures.load());
  CUcontext current = nullptr;
  CU(cuCtxGetCurrent(&current));
  EXPECT_EQ(ctx_, current) << "other threads' stacks are their own";
  EXPECT_EQ("", take_reports());
}

TEST_F(ThreadKeys, OverwrittenContextKeyIsReportedAndTheDriverGoesOn) {
  const pthread_key_t key = key_set_by([&] { return cuCtxPushCurrent(ctx_) == CUDA_SUCCESS; });
  ASSERT_NE(kNoKey, key);
  const std::string named = "this thread's pthread key " + std::to_string(key) + " (libcuda: context stack) reads ";
  static int foreign;  // what another C library's pthread_setspecific leaves in the slot
  std::thread([&] {
    CU(cuCtxPushCurrent(ctx_));
    void* stored = pthread_getspecific(key);
    ASSERT_NE(nullptr, stored);
    CUcontext current = nullptr;

    pthread_setspecific(key, &foreign);
    CU(cuCtxGetCurrent(&current));
    EXPECT_EQ(ctx_, current) << "the driver goes on with what it stored";
    std::string reports = take_reports();
    EXPECT_NE(std::string::npos,
              reports.find("cuCtxGetCurrent: " + named + pointer(&foreign) + " where the library stored " +
                           pointer(stored) + ": another C library in the process has written that key's slot"))
        << reports;
    CU(cuCtxGetCurrent(&current));
    EXPECT_EQ("", take_reports()) << "one report per foreign value";

    pthread_setspecific(key, nullptr);
    CU(cuCtxSynchronize());
    reports = take_reports();
    EXPECT_NE(std::string::npos,
              reports.find("cuCtxSynchronize: " + named + "NULL where the library stored " + pointer(stored)))
        << reports;

    pthread_setspecific(key, stored);
    CU(cuCtxGetCurrent(&current));
    EXPECT_EQ(ctx_, current);
    EXPECT_EQ("", take_reports()) << "the key holds what was stored again";

    // The thread exits with a foreign value in the slot: the key's destructor reports it and must
    // not free it (`foreign` is no heap block: freeing it would abort).
    pthread_setspecific(key, &foreign);
  }).join();
  const std::string reports = take_reports();
  EXPECT_NE(std::string::npos, reports.find("thread exit: " + named + pointer(&foreign))) << reports;
}

TEST_F(ThreadKeys, ValueWhereTheDriverStoredNothingIsReported) {
  const pthread_key_t key = key_set_by([&] { return cuCtxPushCurrent(ctx_) == CUDA_SUCCESS; });
  ASSERT_NE(kNoKey, key);
  static int foreign;
  std::thread([&] {
    pthread_setspecific(key, &foreign);  // before this thread made any CUDA call
    CUcontext current = ctx_;
    CU(cuCtxGetCurrent(&current));
    EXPECT_EQ(nullptr, current) << "no context is current on a new thread, whatever the slot holds";
  }).join();
  const std::string reports = take_reports();
  EXPECT_NE(std::string::npos,
            reports.find("cuCtxGetCurrent: this thread's pthread key " + std::to_string(key) +
                         " (libcuda: context stack) reads " + pointer(&foreign) + " where the library stored nothing"))
      << reports;
}

TEST_F(ThreadKeys, OverwrittenNvmlKeyIsReported) {
  const pthread_key_t key =
      key_set_by([&] { return nvml_->init() == NVML_SUCCESS && nvml_->shutdown() == NVML_SUCCESS; });
  ASSERT_NE(kNoKey, key);
  static int foreign;
  std::thread([&] {
    ASSERT_EQ(NVML_SUCCESS, nvml_->init());
    void* stored = pthread_getspecific(key);
    pthread_setspecific(key, &foreign);
    unsigned n = 0;
    EXPECT_EQ(NVML_SUCCESS, nvml_->count(&n));
    EXPECT_EQ(1u, n);
    pthread_setspecific(key, stored);
    EXPECT_EQ(NVML_SUCCESS, nvml_->shutdown());
  }).join();
  const std::string reports = take_reports();
  EXPECT_NE(std::string::npos, reports.find("nvmlDeviceGetCount_v2: this thread's pthread key " + std::to_string(key) +
                                            " (libnvidia-ml: calls) reads " + pointer(&foreign)))
      << reports;
}

TEST_F(ThreadKeys, ForkedChildInheritsItsThreadsValues) {
  unsigned n = 0;
  ASSERT_EQ(NVML_SUCCESS, nvml_->init());
  ASSERT_EQ(NVML_SUCCESS, nvml_->count(&n));
  const pid_t child = fork();
  ASSERT_NE(-1, child);
  if (child == 0) {
    // The driver is unusable in a child forked after cuInit, as on the real driver; its answer comes
    // without a report, because the thread's keys still hold what the parent's thread stored.
    CUcontext current = nullptr;
    const CUresult r = cuCtxGetCurrent(&current);
    const bool nvml_ok = nvml_->count(&n) == NVML_SUCCESS;
    _exit(r == CUDA_ERROR_NOT_INITIALIZED && nvml_ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(child, waitpid(child, &status, 0));
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(NVML_SUCCESS, nvml_->shutdown());
  EXPECT_EQ("", take_reports());
}

// Issue 22 as it happened on the real GPU (libslice at b9e6429 did this in front of every context):
// NVML loaded into a new link-map namespace, which loads a second libc.so.6 whose keys, numbered
// from 0, are the driver's numbers; nvmlInit_v2 and a device query there on the main thread; then a
// context. The real driver read NVML's pointer as its own and crashed; the simulator must report.
// In a process of its own (a death test re-runs this program), so that its main thread is fresh.
void second_libc_then_context() {
  CUdevice dev = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS) std::_Exit(3);
  void* lib = dlmopen(LM_ID_NEWLM, kNvmlPath, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlmopen: %s\n", dlerror());
    std::_Exit(3);
  }
  const Nvml nvml(lib);
  nvmlDevice_t device = nullptr;
  unsigned n = 0;
  if (!nvml.complete() || nvml.init() != NVML_SUCCESS || nvml.handle(0, &device) != NVML_SUCCESS ||
      nvml.processes(device, &n, nullptr) != NVML_SUCCESS)
    std::_Exit(3);
  CUcontext ctx = nullptr;
  if (cuCtxCreate(&ctx, nullptr, 0, dev) != CUDA_SUCCESS) std::_Exit(3);
  std::_Exit(0);
}

TEST(ThreadKeysDeathTest, NvmlInANewNamespaceIsReportedAtTheNextContext) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  take_reports();
  EXPECT_EXIT(second_libc_then_context(), ::testing::ExitedWithCode(0),
              "illegal call: cuCtxCreate_v4: this thread's pthread key [0-9]+ \\(libcuda: context stack\\) reads "
              "0x[0-9a-f]+ where the library stored nothing: another C library in the process");
  EXPECT_NE(std::string::npos, take_reports().find("cuCtxCreate_v4: this thread's pthread key"));
}

}  // namespace
