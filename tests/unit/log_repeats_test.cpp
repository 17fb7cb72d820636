// RepeatFilter (libslice/log/log_repeats.h) with a clock the test moves: a burst is written, the rest
// counted, and the count comes back as one line when the window closes, at the next line, or when
// drained at exit.
#include "log_repeats.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

using slice::LogLevel;
using slice::log::RepeatFilter;
using slice::log::RepeatSummary;

constexpr std::int64_t kSecond = 1'000'000'000;

TEST(RepeatFilter, WritesABurstThenCountsAndSummarisesWhenTheLineComesBack) {
  RepeatFilter filter;
  std::vector<RepeatSummary> due;
  int written = 0;
  for (int i = 0; i < 1000; ++i) written += filter.admit(LogLevel::warn, "same", i * 1000, due) ? 1 : 0;
  EXPECT_EQ(written, static_cast<int>(RepeatFilter::kBurst));
  EXPECT_TRUE(due.empty());
  // After the window the line is written again, preceded by what was dropped.
  EXPECT_TRUE(filter.admit(LogLevel::warn, "same", 11 * kSecond, due));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].level, LogLevel::warn);
  EXPECT_EQ(due[0].suppressed, 1000u - RepeatFilter::kBurst);
  EXPECT_EQ(due[0].line(), "same (repeated 990 more times in the last 11 s)");
}

TEST(RepeatFilter, LevelAndTextTellLinesApart) {
  RepeatFilter filter;
  std::vector<RepeatSummary> due;
  for (unsigned i = 0; i < RepeatFilter::kBurst; ++i) {
    ASSERT_TRUE(filter.admit(LogLevel::warn, "a", 0, due));
    ASSERT_TRUE(filter.admit(LogLevel::info, "a", 0, due));
    ASSERT_TRUE(filter.admit(LogLevel::warn, "b", 0, due));
  }
  EXPECT_FALSE(filter.admit(LogLevel::warn, "a", 0, due));
  EXPECT_FALSE(filter.admit(LogLevel::info, "a", 0, due));
  EXPECT_TRUE(filter.admit(LogLevel::warn, "c", 0, due));
  EXPECT_TRUE(due.empty());
}

TEST(RepeatFilter, AClosedWindowIsSummarisedByAnyLaterLine) {
  RepeatFilter filter;
  std::vector<RepeatSummary> due;
  for (unsigned i = 0; i < RepeatFilter::kBurst + 5; ++i) filter.admit(LogLevel::error, "burst", kSecond, due);
  EXPECT_TRUE(filter.admit(LogLevel::info, "other", 5 * kSecond, due));
  EXPECT_TRUE(due.empty());  // the window is still open
  EXPECT_TRUE(filter.admit(LogLevel::info, "other", 12 * kSecond, due));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].line(), "burst (repeated 5 more times in the last 11 s)");
  due.clear();
  EXPECT_TRUE(filter.admit(LogLevel::info, "other", 13 * kSecond, due));
  EXPECT_TRUE(due.empty());  // said once
}

TEST(RepeatFilter, DrainSaysEverythingPendingAndClearForgets) {
  RepeatFilter filter;
  std::vector<RepeatSummary> due;
  for (unsigned i = 0; i < RepeatFilter::kBurst + 3; ++i) filter.admit(LogLevel::warn, "x", 0, due);
  filter.drain(kSecond / 2, due);
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].line(), "x (repeated 3 more times in the last 1 s)");
  due.clear();
  filter.drain(kSecond, due);
  EXPECT_TRUE(due.empty());
  for (unsigned i = 0; i < RepeatFilter::kBurst; ++i) filter.admit(LogLevel::warn, "x", 0, due);
  filter.clear();
  EXPECT_TRUE(filter.admit(LogLevel::warn, "x", 0, due));
}

TEST(RepeatFilter, ManyDistinctLinesEvictTheOldestWithItsSummary) {
  RepeatFilter filter;
  std::vector<RepeatSummary> due;
  for (unsigned i = 0; i < RepeatFilter::kBurst + 2; ++i) filter.admit(LogLevel::warn, "first", 0, due);
  for (std::size_t i = 0; i < RepeatFilter::kTracked; ++i)
    EXPECT_TRUE(filter.admit(LogLevel::warn, "line " + std::to_string(i), kSecond, due));
  ASSERT_EQ(due.size(), 1u);
  EXPECT_EQ(due[0].message, "first");
  EXPECT_EQ(due[0].suppressed, 2u);
}

}  // namespace
