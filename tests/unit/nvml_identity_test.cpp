// How a process finds its own entry in NVML's lists where the kernel cannot tell it (a PID namespace
// with a /proc of its own: libslice/coordinator/nvml_identity.h).
#include "nvml_identity.h"

#include <gtest/gtest.h>

namespace {

using slice::NvmlIdentity;

std::optional<std::uint32_t> kernel_cannot_tell() { return std::nullopt; }
std::optional<std::uint32_t> kernel_says_7() { return 7; }

TEST(NvmlIdentity, WhatTheKernelSaysComesFirst) {
  NvmlIdentity id(kernel_says_7);
  id.observe_context({}, {{10, 300 << 20}});
  ASSERT_TRUE(id.pid().has_value());
  EXPECT_EQ(*id.pid(), 7u);
}

TEST(NvmlIdentity, TheOneEntryThatGrewAcrossItsContextIsThisProcess) {
  NvmlIdentity id(kernel_cannot_tell);
  EXPECT_FALSE(id.pid().has_value());
  id.observe_context({{100, 1 << 20}}, {{100, 1 << 20}, {4242, 300 << 20}});
  ASSERT_TRUE(id.pid().has_value());
  EXPECT_EQ(*id.pid(), 4242u);
}

TEST(NvmlIdentity, TwoThatGrewAtOnceAreNarrowedByTheNextContextNeverGuessed) {
  NvmlIdentity id(kernel_cannot_tell);
  id.observe_context({}, {{10, 300 << 20}, {20, 200 << 20}});
  EXPECT_FALSE(id.pid().has_value()) << "two grew at once: either may be this process";
  id.observe_context({{10, 300 << 20}, {20, 200 << 20}}, {{10, 600 << 20}, {20, 200 << 20}, {30, 5}});
  ASSERT_TRUE(id.pid().has_value());  // 10 and 20, then 10 and 30: 10
  EXPECT_EQ(*id.pid(), 10u);
}

TEST(NvmlIdentity, NothingThatGrewTeachesNothingAndAContradictionDecidesNothing) {
  NvmlIdentity id(kernel_cannot_tell);
  id.observe_context({{10, 5}}, {{10, 5}});  // a context of no memory: nothing to learn
  id.observe_context({}, {{10, 1}, {20, 1}});
  EXPECT_FALSE(id.pid().has_value());
  // Neither 10 nor 20 grew this time: one of the two observations was wrong (this process's entry
  // may not have grown while a neighbour's did), so 30 alone is no answer yet.
  id.observe_context({}, {{30, 1}});
  EXPECT_FALSE(id.pid().has_value()) << "decided on the observation that contradicted the others";
  id.observe_context({{30, 1}}, {{30, 2}, {40, 1}});  // 30 again: now it is this process
  ASSERT_TRUE(id.pid().has_value());
  EXPECT_EQ(*id.pid(), 30u);
}

TEST(NvmlIdentity, ANeighbourThatGrewAloneAfterAContradictionIsNotTakenForThisProcess) {
  NvmlIdentity id(kernel_cannot_tell);
  id.observe_context({}, {{10, 1}, {20, 1}});                           // this process is 10; 20 started at once
  id.observe_context({{10, 1}, {20, 1}}, {{10, 1}, {20, 1}, {50, 1}});  // its entry did not grow; 50 did
  id.observe_context({{10, 1}}, {{10, 2}});                             // 10 grew alone
  EXPECT_FALSE(id.pid().has_value() && *id.pid() == 50u) << "the neighbour 50 was taken for this process";
  id.observe_context({{10, 2}}, {{10, 3}, {60, 1}});
  ASSERT_TRUE(id.pid().has_value());
  EXPECT_EQ(*id.pid(), 10u);
}

TEST(NvmlIdentity, AForkedChildForgetsIt) {
  NvmlIdentity id(kernel_cannot_tell);
  id.observe_context({}, {{30, 1}});
  ASSERT_TRUE(id.pid().has_value());
  id.reset();
  EXPECT_FALSE(id.pid().has_value());
}

}  // namespace
