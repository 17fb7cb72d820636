// The plugin's pure parts: slice IDs, the inventory's arithmetic, the preferred allocation, the
// tenant of an allocation, and the container edits (also what slice-cdi-gen writes).
#include <gtest/gtest.h>

#include "allocation_policy.h"
#include "container_edits.h"
#include "slice_inventory.h"
#include "tenant_file.h"

namespace {

using namespace slice::k8s;

const std::string kA = "GPU-11111111-2222-3333-4444-555555555555";
const std::string kB = "GPU-66666666-7777-8888-9999-aaaaaaaaaaaa";

Inventory two_gpus(unsigned slices, std::uint64_t reserve = 0) {
  Inventory inventory;
  std::string error;
  EXPECT_TRUE(
      Inventory::build({{0, kA, "A", 24ull << 30}, {1, kB, "B", 10ull << 30}}, {slices, reserve}, inventory, error))
      << error;
  return inventory;
}

std::string id(const std::string& gpu, unsigned k) { return slice_id(gpu, k); }

TEST(SliceInventory, IdsAndArithmetic) {
  EXPECT_EQ(id(kA, 3), kA + "::3");
  const auto parsed = parse_slice_id(kA + "::12");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->gpu_uuid, kA);
  EXPECT_EQ(parsed->index, 12u);
  for (const std::string& bad : std::vector<std::string>{kA, kA + "::", kA + "::x", kA + "::01", "::1", kA + "::1234"})
    EXPECT_FALSE(parse_slice_id(bad)) << bad;
  EXPECT_LE(id(kA, kMaxSlicesPerGpu - 1).size(), kMaxDeviceIdLength);

  const Inventory inv = two_gpus(3, 1ull << 30);
  ASSERT_EQ(inv.gpus().size(), 2u);
  // (24 GiB - 1 GiB) / 3, rounded down to whole MiB; shares of 33%.
  EXPECT_EQ(inv.gpus()[0].memory_per_slice, (23ull << 30) / 3 / (1 << 20) * (1 << 20));
  EXPECT_EQ(inv.gpus()[0].share_per_slice, 33u);
  EXPECT_EQ(inv.slice_ids().size(), 6u);
  EXPECT_TRUE(inv.contains(id(kB, 2)));
  EXPECT_FALSE(inv.contains(id(kB, 3)));

  Inventory out;
  std::string error;
  EXPECT_FALSE(Inventory::build({{0, kA, "A", 1ull << 30}}, {4, 1ull << 30}, out, error));
  EXPECT_NE(error.find("too little"), std::string::npos) << error;
  EXPECT_FALSE(Inventory::build({{0, kA, "A", 1ull << 30}}, {0, 0}, out, error));
  EXPECT_FALSE(Inventory::build({{0, kA, "A", 1ull << 30}}, {101, 0}, out, error));
}

TEST(PreferredAllocation, PacksOntoOneGpu) {
  const Inventory inv = two_gpus(4);
  const std::vector<std::string> all = inv.slice_ids();
  // Fits on either: the tightest fit that still holds it (both have 4 free: the first).
  EXPECT_EQ(preferred_allocation(inv, all, {}, 3), (std::vector<std::string>{id(kA, 0), id(kA, 1), id(kA, 2)}));
  // A has 1 free, B 3: two go to B.
  EXPECT_EQ(preferred_allocation(inv, {id(kA, 1), id(kB, 3), id(kB, 0), id(kB, 1)}, {}, 2),
            (std::vector<std::string>{id(kB, 0), id(kB, 1)}));
  // A has 2 free, B 4: one slice goes to A (the tightest fit, keeping B whole).
  EXPECT_EQ(preferred_allocation(inv, {id(kA, 2), id(kA, 3), id(kB, 0), id(kB, 1), id(kB, 2), id(kB, 3)}, {}, 1),
            (std::vector<std::string>{id(kA, 2)}));
  // Must-include slices are kept, and the rest follows them onto their GPU.
  EXPECT_EQ(preferred_allocation(inv, all, {id(kB, 2)}, 3),
            (std::vector<std::string>{id(kB, 2), id(kB, 0), id(kB, 1)}));
  // Too big for one GPU: spread, largest first.
  EXPECT_EQ(preferred_allocation(inv, {id(kA, 0), id(kB, 0), id(kB, 1)}, {}, 3).size(), 3u);
  // Unknown IDs are never chosen; fewer come back when too few are available.
  EXPECT_EQ(preferred_allocation(inv, {"GPU-x::0", id(kA, 0)}, {}, 2), (std::vector<std::string>{id(kA, 0)}));
}

TEST(ContainerEdits, TenantNames) {
  EXPECT_EQ(tenant_for_slices({id(kA, 2), id(kA, 0)}), "k8s-55555555-0-2");
  const std::string spread = tenant_for_slices({id(kA, 0), id(kB, 0)});
  EXPECT_TRUE(spread.starts_with("k8s-")) << spread;
  EXPECT_EQ(spread.size(), 4u + 16u);
  EXPECT_EQ(spread, tenant_for_slices({id(kB, 0), id(kA, 0)})) << "the order of the IDs does not matter";
  EXPECT_NE(spread, tenant_for_slices({id(kA, 1), id(kB, 0)}));
  std::vector<std::string> many;
  for (unsigned k = 0; k < 40; ++k) many.push_back(id(kA, k));
  EXPECT_TRUE(slice::valid_tenant_name(tenant_for_slices(many)));
}

TEST(ContainerEdits, SpreadAllocationVariablesAndPolicy) {
  const Inventory inv = two_gpus(4);
  const ContainerEdits e = container_edits(inv, {{kA, 2}, {kB, 1}}, EditPaths{}, "t");
  EXPECT_EQ(e.env.at("SLICE_MEMORY_LIMIT_GPU_11111111_2222_3333_4444_555555555555"), std::to_string(12ull << 30));
  EXPECT_EQ(e.env.at("SLICE_COMPUTE_SHARE_GPU_11111111_2222_3333_4444_555555555555"), "50");
  EXPECT_EQ(e.env.at("SLICE_MEMORY_LIMIT_GPU_66666666_7777_8888_9999_aaaaaaaaaaaa"), std::to_string(2560ull << 20));
  EXPECT_EQ(e.env.at("SLICE_COMPUTE_SHARE_GPU_66666666_7777_8888_9999_aaaaaaaaaaaa"), "25");
  EXPECT_EQ(e.env.at("NVIDIA_VISIBLE_DEVICES"), kA + "," + kB);
  EXPECT_EQ(e.env.at("SLICE_TENANT"), "t");
  EXPECT_EQ(e.policy.compute_share, 25u) << "the smallest share of the allocation's GPUs";
  EXPECT_EQ(e.policy.per_gpu.at(kB), slice::MemoryLimit::of_bytes(2560ull << 20));
  EXPECT_FALSE(container_edits(inv, {{kA, 1}}, EditPaths{}, "").env.contains("SLICE_TENANT"));
}

}  // namespace
