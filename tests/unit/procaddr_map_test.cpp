// The cuGetProcAddress map against the CUDA 13 runtime's recorded look-ups, plus targeted cases.
#include "procaddr_map.h"

#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

using slice::ProcAddrStatus;
using slice::resolve_procaddr;

constexpr unsigned long long kDefault = 0, kLegacy = 1, kPerThread = 2;

// The export name, or "NOT FOUND" / "VERSION NOT SUFFICIENT", so one EXPECT_EQ shows both sides.
std::string resolve(std::string_view name, int version, unsigned long long flags) {
  const auto r = resolve_procaddr(name, version, flags);
  switch (r.status) {
    case ProcAddrStatus::found:
      return r.export_name != nullptr ? r.export_name : "FOUND BUT NULL";
    case ProcAddrStatus::version_not_sufficient:
      return r.export_name == nullptr ? "VERSION NOT SUFFICIENT" : "NOT FOUND WITH A NAME";
    case ProcAddrStatus::symbol_not_found:
      return r.export_name == nullptr ? "NOT FOUND" : "NOT FOUND WITH A NAME";
  }
  return "BAD STATUS";
}

TEST(ProcAddrMap, ReplaysEveryRecordedCudart13Lookup) {
  const std::string path = SLICE_TEST_DATA_DIR "/cudart13-procaddr-lookups.tsv";
  std::ifstream in(path);
  ASSERT_TRUE(in) << "cannot open " << path;

  int rows = 0, line_no = 0;
  bool header_seen = false;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty() || line[0] == '#') continue;
    if (!header_seen) {  // "symbol cudaVersion flags export"
      header_seen = true;
      continue;
    }
    std::vector<std::string> cols;
    std::stringstream ss(line);
    for (std::string col; std::getline(ss, col, '\t');) cols.push_back(col);
    ASSERT_EQ(cols.size(), 4u) << path << ":" << line_no << ": " << line;

    const std::string& symbol = cols[0];  // empty on the runtime's first, probing look-up
    const int version = std::stoi(cols[1]);
    const unsigned long long flags = std::stoull(cols[2]);
    const std::string& expected = cols[3];
    // The recording only tells found from not found; "NOT FOUND" covers both failure statuses.
    std::string got = resolve(symbol, version, flags);
    if (expected == "NOT FOUND" && got == "VERSION NOT SUFFICIENT") got = "NOT FOUND";
    EXPECT_EQ(got, expected) << path << ":" << line_no << ": " << symbol << " " << version << " " << flags;
    ++rows;
  }
  std::cout << "[          ] checked " << rows << " recorded look-ups\n";
  RecordProperty("rows_checked", rows);
  EXPECT_GE(rows, 400) << "the recording should hold the runtime's ~440 look-ups";
}

TEST(ProcAddrMap, OneNameMeansDifferentAbisByVersion) {
  EXPECT_EQ(resolve("cuCtxCreate", 2000, kDefault), "cuCtxCreate");
  EXPECT_EQ(resolve("cuCtxCreate", 3020, kDefault), "cuCtxCreate_v2");
  EXPECT_EQ(resolve("cuCtxCreate", 11030, kDefault), "cuCtxCreate_v2");
  EXPECT_EQ(resolve("cuCtxCreate", 11040, kDefault), "cuCtxCreate_v3");
  EXPECT_EQ(resolve("cuCtxCreate", 12050, kDefault), "cuCtxCreate_v4");
  EXPECT_EQ(resolve("cuCtxCreate", 13000, kDefault), "cuCtxCreate_v4");

  EXPECT_EQ(resolve("cuMemAdvise", 8000, kDefault), "cuMemAdvise");
  EXPECT_EQ(resolve("cuMemAdvise", 12010, kDefault), "cuMemAdvise");
  EXPECT_EQ(resolve("cuMemAdvise", 12020, kDefault), "cuMemAdvise_v2");
}

TEST(ProcAddrMap, PerThreadFlagSelectsPtszAndPtdsTwins) {
  EXPECT_EQ(resolve("cuLaunchKernel", 7000, kPerThread), "cuLaunchKernel_ptsz");
  EXPECT_EQ(resolve("cuLaunchKernel", 7000, kDefault), "cuLaunchKernel");
  EXPECT_EQ(resolve("cuLaunchKernel", 7000, kLegacy), "cuLaunchKernel");
  EXPECT_EQ(resolve("cuMemcpyHtoD", 7000, kPerThread), "cuMemcpyHtoD_v2_ptds");  // twin of the v3020 ABI
  EXPECT_EQ(resolve("cuStreamGetCaptureInfo", 12030, kPerThread), "cuStreamGetCaptureInfo_v3_ptsz");
  EXPECT_EQ(resolve("cuMemPrefetchAsync", 12020, kPerThread), "cuMemPrefetchAsync_v2_ptsz");
  // Before the per-thread twin existed, and for functions that never had one: the default symbol.
  EXPECT_EQ(resolve("cuLaunchKernel", 4000, kPerThread), "cuLaunchKernel");
  EXPECT_EQ(resolve("cuMemAlloc", 3020, kPerThread), "cuMemAlloc_v2");
  // Both stream bits at once: the default; bits above the two stream flags are ignored.
  EXPECT_EQ(resolve("cuLaunchKernel", 7000, kLegacy | kPerThread), "cuLaunchKernel");
  EXPECT_EQ(resolve("cuLaunchKernel", 7000, kPerThread | 0x100), "cuLaunchKernel_ptsz");
  EXPECT_EQ(resolve("cuLaunchKernel", 7000, 0x100), "cuLaunchKernel");
}

TEST(ProcAddrMap, VersionBelowEveryAbiIsNotSufficient) {
  EXPECT_EQ(resolve("cuGetProcAddress", 11020, kDefault), "VERSION NOT SUFFICIENT");
  EXPECT_EQ(resolve("cuMemAllocAsync", 11010, kPerThread), "VERSION NOT SUFFICIENT");
  EXPECT_EQ(resolve("cuInit", 0, kDefault), "VERSION NOT SUFFICIENT");
  EXPECT_EQ(resolve("cuInit", -1, kDefault), "VERSION NOT SUFFICIENT");
  EXPECT_EQ(resolve("cuGetProcAddress", 11030, kDefault), "cuGetProcAddress");
  EXPECT_EQ(resolve("cuGetProcAddress", 12000, kDefault), "cuGetProcAddress_v2");
}

TEST(ProcAddrMap, UnknownAndEmptyNamesAreNotFound) {
  EXPECT_EQ(resolve("cuNoSuchFunction", 13000, kDefault), "NOT FOUND");
  EXPECT_EQ(resolve("cuMemAlloc_v2", 13000, kDefault), "NOT FOUND");  // callers ask by base name
  EXPECT_EQ(resolve("cumemalloc", 13000, kDefault), "NOT FOUND");     // case matters
  EXPECT_EQ(resolve("cuMemAllo", 13000, kDefault), "NOT FOUND");      // no prefix match
  EXPECT_EQ(resolve("cuMemAllocX", 13000, kDefault), "NOT FOUND");
  EXPECT_EQ(resolve("", 0, kDefault), "NOT FOUND");
  EXPECT_EQ(resolve("", 13000, kPerThread), "NOT FOUND");
  EXPECT_EQ(resolve(std::string_view{"cuInit\0", 7}, 13000, kDefault), "NOT FOUND");
}

TEST(ProcAddrMap, OverridesTheRuleCannotDerive) {
  EXPECT_EQ(resolve("cuProfilerStart", 4000, kDefault), "cuProfilerStart");  // cudaProfilerTypedefs.h
  EXPECT_EQ(resolve("cuGraphInstantiate", 11000, kDefault), "cuGraphInstantiate_v2");
  EXPECT_EQ(resolve("cuGraphInstantiate", 12000, kDefault), "cuGraphInstantiateWithFlags");  // cuda.h rename
}

TEST(ProcAddrMap, GraphicsInteropFollowsTheRuleFromItsOwnHeaders) {
  // cudaGLTypedefs.h, cudaEGLTypedefs.h, cudaVDPAUTypedefs.h, with the renames of cudaGL.h and the like.
  EXPECT_EQ(resolve("cuGLCtxCreate", 2000, kDefault), "cuGLCtxCreate");
  EXPECT_EQ(resolve("cuGLCtxCreate", 3020, kDefault), "cuGLCtxCreate_v2");
  EXPECT_EQ(resolve("cuGLGetDevices", 4010, kDefault), "cuGLGetDevices");
  EXPECT_EQ(resolve("cuGLGetDevices", 6050, kDefault), "cuGLGetDevices_v2");
  EXPECT_EQ(resolve("cuGLMapBufferObject", 7000, kPerThread), "cuGLMapBufferObject_v2_ptds");
  EXPECT_EQ(resolve("cuGLMapBufferObjectAsync", 7000, kPerThread), "cuGLMapBufferObjectAsync_v2_ptsz");
  EXPECT_EQ(resolve("cuGLMapBufferObjectAsync", 7000, kDefault), "cuGLMapBufferObjectAsync_v2");
  EXPECT_EQ(resolve("cuVDPAUCtxCreate", 3020, kDefault), "cuVDPAUCtxCreate_v2");
  EXPECT_EQ(resolve("cuEventCreateFromEGLSync", 9000, kDefault), "cuEventCreateFromEGLSync");
  EXPECT_EQ(resolve("cuEGLStreamConsumerConnect", 6050, kDefault), "VERSION NOT SUFFICIENT");
  EXPECT_EQ(resolve("cuWGLGetDevice", 13000, kDefault), "NOT FOUND");  // #ifdef _WIN32 in its header
}

TEST(ProcAddrMap, TableIsSortedAndMatchesTheExportList) {
  std::set<std::string> exports;
#define SLICE_DRIVER_EXPORT(symbol) exports.insert(#symbol);
#include "driver_exports.inc"
#undef SLICE_DRIVER_EXPORT

  const auto entries = slice::procaddr_entries();
  ASSERT_GT(entries.size(), 500u);
  std::set<std::string> referenced;
  for (size_t i = 0; i < entries.size(); ++i) {
    referenced.insert(entries[i].export_name);
    // Every entry must be reachable through the resolver at its own version.
    EXPECT_EQ(resolve(entries[i].name, entries[i].version, entries[i].per_thread ? kPerThread : kDefault),
              entries[i].export_name);
    if (i == 0) continue;
    const std::string_view prev{entries[i - 1].name}, cur{entries[i].name};
    EXPECT_TRUE(prev < cur || (prev == cur && entries[i - 1].version < entries[i].version) ||
                (prev == cur && entries[i - 1].version == entries[i].version && !entries[i - 1].per_thread &&
                 entries[i].per_thread))
        << "out of order at " << i << ": " << prev << " " << cur;
  }
  EXPECT_EQ(referenced, exports);
}

}  // namespace
