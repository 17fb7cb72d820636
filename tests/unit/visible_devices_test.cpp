// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER as the simulated driver applies them
// (tools/simgpu/visible_devices.h), each rule from the CUDA Programming Guide's "CUDA Environment
// Variables" or, where it is silent, from what real drivers are observed to do.
#include "visible_devices.h"

#include <gtest/gtest.h>

namespace simgpu {
namespace {

// Four devices: buses 0x17..0x1A; multiprocessors 64, 128, 96, 128. Fastest first: 1, 3 (the
// same speed, in bus order), 2, 0.
const std::vector<PhysicalDevice> kFour = {
    {"GPU-aaaa0000-0000-4000-8000-000000000000", 0x17, 64},
    {"GPU-bbbb1111-0000-4000-8000-000000000001", 0x18, 128},
    {"GPU-cccc2222-0000-4000-8000-000000000002", 0x19, 96},
    {"GPU-cccc3333-0000-4000-8000-000000000003", 0x1A, 128},
};
using V = std::vector<int>;

TEST(VisibleDevices, UnsetShowsEveryDeviceFastestFirstOrByBus) {
  EXPECT_EQ(visible_devices(kFour, nullptr, nullptr), (V{1, 3, 2, 0}));
  EXPECT_EQ(visible_devices(kFour, nullptr, "FASTEST_FIRST"), (V{1, 3, 2, 0}));
  EXPECT_EQ(visible_devices(kFour, nullptr, "PCI_BUS_ID"), (V{0, 1, 2, 3}));
  EXPECT_EQ(visible_devices(kFour, nullptr, "nonsense"), (V{1, 3, 2, 0})) << "anything else: the default";
}

TEST(VisibleDevices, OrdinalsIndexTheChosenOrder) {
  EXPECT_EQ(visible_devices(kFour, "2,1", "PCI_BUS_ID"), (V{2, 1}));
  EXPECT_EQ(visible_devices(kFour, "2,1", nullptr), (V{2, 3})) << "positions in the fastest-first order";
  EXPECT_EQ(visible_devices(kFour, " 1 , +0", "PCI_BUS_ID"), (V{1, 0})) << "whitespace and '+' ignored";
  EXPECT_EQ(visible_devices(kFour, "1gpu", "PCI_BUS_ID"), (V{1})) << "what follows the digits is ignored";
}

TEST(VisibleDevices, UuidsWithOrWithoutThePrefixAndUniquePrefixes) {
  EXPECT_EQ(visible_devices(kFour, "GPU-cccc2222-0000-4000-8000-000000000002", nullptr), (V{2}));
  EXPECT_EQ(visible_devices(kFour, "cccc2222-0000-4000-8000-000000000002", nullptr), (V{2}));
  EXPECT_EQ(visible_devices(kFour, "GPU-bbbb,GPU-aaaa", nullptr), (V{1, 0})) << "unique prefixes";
  EXPECT_EQ(visible_devices(kFour, "bbbb,0", "PCI_BUS_ID"), (V{1, 0})) << "mixed with ordinals";
  EXPECT_EQ(visible_devices(kFour, "GPU-CCCC2222", nullptr), (V{2})) << "any letter case";
}

TEST(VisibleDevices, TheListEndsAtTheFirstEntryThatNamesNoDevice) {
  EXPECT_EQ(visible_devices(kFour, "0,2,-1,1", "PCI_BUS_ID"), (V{0, 2}));
  EXPECT_EQ(visible_devices(kFour, "1,4,2", "PCI_BUS_ID"), (V{1})) << "an ordinal past the end";
  EXPECT_EQ(visible_devices(kFour, "1,GPU-cccc,2", "PCI_BUS_ID"), (V{1})) << "an ambiguous prefix";
  EXPECT_EQ(visible_devices(kFour, "1,GPU-dddd", "PCI_BUS_ID"), (V{1})) << "an unknown UUID";
  EXPECT_EQ(visible_devices(kFour, "1,MIG-bbbb1111", "PCI_BUS_ID"), (V{1})) << "no MIG devices";
  EXPECT_EQ(visible_devices(kFour, "7", nullptr), (V{})) << "a single device that does not exist: none";
  EXPECT_EQ(visible_devices(kFour, "1,,2", "PCI_BUS_ID"), (V{1})) << "an empty entry";
}

TEST(VisibleDevices, EmptyMeansNoneAndADeviceNamedTwiceMeansNone) {
  EXPECT_EQ(visible_devices(kFour, "", nullptr), (V{}));
  EXPECT_EQ(visible_devices(kFour, "0,0", "PCI_BUS_ID"), (V{}));
  EXPECT_EQ(visible_devices(kFour, "1,GPU-bbbb", "PCI_BUS_ID"), (V{})) << "the same device by ordinal and UUID";
}

}  // namespace
}  // namespace simgpu
