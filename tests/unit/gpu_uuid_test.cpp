// A GPU's UUID in its three spellings (libslice/config/gpu_uuid.h).
#include "gpu_uuid.h"

#include <gtest/gtest.h>

namespace slice {
namespace {

constexpr const char* kUuid = "GPU-516d696d-6770-4075-8000-00000000abcd";

TEST(GpuUuid, TextOfTheDriversBytes) {
  const std::uint8_t bytes[16] = {0x51, 0x6d, 0x69, 0x6d, 0x67, 0x70, 0x40, 0x75,
                                  0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0xab, 0xcd};
  EXPECT_EQ(uuid_text(bytes), kUuid);
}

TEST(GpuUuid, TypedTextIsMadeCanonical) {
  EXPECT_EQ(canonical_gpu_uuid(kUuid), kUuid);
  EXPECT_EQ(canonical_gpu_uuid("gpu-516D696D-6770-4075-8000-00000000ABCD"), kUuid);
  for (const char* bad : {"", "GPU-516d696d", "GPU_516d696d_6770_4075_8000_00000000abcd",
                          "GPU-516d696d-6770-4075-8000-00000000abcg", "MIG-516d696d-6770-4075-8000-00000000abcd",
                          "GPU-516d696d-6770-4075-8000-00000000abcd0", "GPU-516d696d6-770-4075-8000-00000000abcd"})
    EXPECT_EQ(canonical_gpu_uuid(bad), std::nullopt) << bad;
}

TEST(GpuUuid, VariableSuffixBothWays) {
  EXPECT_EQ(gpu_uuid_suffix(kUuid), "GPU_516d696d_6770_4075_8000_00000000abcd");
  EXPECT_EQ(gpu_uuid_of_suffix("GPU_516d696d_6770_4075_8000_00000000ABCD"), kUuid);
  EXPECT_EQ(gpu_uuid_of_suffix(gpu_uuid_suffix(kUuid)), kUuid);
  for (const char* bad : {"GPU-516d696d-6770-4075-8000-00000000abcd", "gpu_516d696d_6770_4075_8000_00000000abcd",
                          "GPU_516d696d_6770_4075_8000", "GPU_516d696d_6770_4075_8000_00000000abcx", "1"})
    EXPECT_EQ(gpu_uuid_of_suffix(bad), std::nullopt) << bad;
}

}  // namespace
}  // namespace slice
