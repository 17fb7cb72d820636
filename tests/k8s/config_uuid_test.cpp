// SLICE_<NAME>_GPU_<uuid>: the per-device variables keyed by GPU UUID (dashes as underscores),
// which the Kubernetes device plugin sets so that a container's own numbering cannot confuse them.
#include <gtest/gtest.h>

#include "config.h"

namespace {

using slice::Environment;
using slice::MemoryLimit;
using slice::parse_config;

const std::string kUuid = "GPU-516d696d-6770-4075-8000-0000000000ab";
const std::string kSuffix = "GPU_516d696d_6770_4075_8000_0000000000ab";

TEST(ConfigUuid, ParsedAndWinsOverOrdinalAndEveryDevice) {
  const auto r = parse_config(Environment{{"SLICE_MEMORY_LIMIT", "8Gi"},
                                          {"SLICE_MEMORY_LIMIT_0", "4Gi"},
                                          {"SLICE_MEMORY_LIMIT_" + kSuffix, "2Gi"},
                                          {"SLICE_COMPUTE_SHARE_GPU_516D696D_6770_4075_8000_0000000000AB", "25"}});
  ASSERT_TRUE(r) << r.error.message();
  const slice::Config& c = *r.config;
  EXPECT_EQ(c.memory_limit.for_device(0, kUuid), MemoryLimit::of_bytes(2ull << 30));
  EXPECT_EQ(c.memory_limit.for_device(0, "GPU-other"), MemoryLimit::of_bytes(4ull << 30));
  EXPECT_EQ(c.memory_limit.for_device(1, "GPU-other"), MemoryLimit::of_bytes(8ull << 30));
  EXPECT_EQ(c.memory_limit.for_gpu(kUuid), MemoryLimit::of_bytes(2ull << 30));
  EXPECT_EQ(c.memory_limit.for_gpu("GPU-other"), MemoryLimit::of_bytes(8ull << 30));
  // Upper-case hex names the same GPU, stored as NVML prints it.
  EXPECT_EQ(c.compute_share.for_device(3, kUuid), 25u);
  EXPECT_TRUE(c.compute_share.set_for_device(3, kUuid));
  EXPECT_FALSE(c.compute_share.set_for_device(3, "GPU-other"));
  EXPECT_EQ(slice::gpu_uuid_suffix(kUuid), kSuffix);
  EXPECT_EQ(slice::gpu_uuid_of_suffix(kSuffix), kUuid);
}

TEST(ConfigUuid, MalformedUuidIsAnErrorNeverNoCap) {
  for (const char* bad :
       {"GPU_516d696d", "GPU_516d696d_6770_4075_8000_0000000000ag", "GPU_516d696d-6770-4075-8000-0000000000ab",
        "GPU_516d696d_6770_4075_8000_0000000000abc", "GPU_516d696d67704075_8000_0000000000ab__"}) {
    const auto r = parse_config(Environment{{"SLICE_MEMORY_LIMIT_" + std::string(bad), "1Gi"}});
    ASSERT_FALSE(r) << bad;
    EXPECT_NE(r.error.reason.find("is not a GPU UUID"), std::string::npos) << r.error.message();
    EXPECT_EQ(r.error.example, "SLICE_MEMORY_LIMIT_GPU_516d696d_6770_4075_8000_000000000000=4Gi");
  }
  const auto value = parse_config(Environment{{"SLICE_MEMORY_LIMIT_" + kSuffix, "12X"}});
  ASSERT_FALSE(value);
  EXPECT_EQ(value.error.variable, "SLICE_MEMORY_LIMIT_" + kSuffix);
  // A process-wide variable has no UUID form either.
  EXPECT_FALSE(parse_config(Environment{{"SLICE_COMPUTE_LIMIT_" + kSuffix, "50"}}));
}

}  // namespace
