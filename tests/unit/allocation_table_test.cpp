// The allocation table (libslice/coordinator/allocation_table.h): what each operation promises, alone and with
// many threads at once, in a table of the default size and in small ones that overflow into the
// locked path; and that a table which never had an entry reserves no memory.
#include "allocation_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#ifdef SLICE_ALLOCATION_TABLE_RACES
// The race test's build (tests/CMakeLists.txt): between the table's steps, now and then another
// thread's turn, so that the interleavings that are rare on a real machine happen here.
namespace slice::test {
void allocation_table_race_point() {
  thread_local std::minstd_rand rng(static_cast<unsigned>(std::hash<std::thread::id>{}(std::this_thread::get_id())));
  const unsigned r = rng() % 8;
  if (r == 0) {
    std::this_thread::yield();
  } else if (r < 3) {
    for (int i = 0; i < 64; ++i) std::atomic_signal_fence(std::memory_order_seq_cst);  // a short spin
  }
}
// How many of the next mmaps of the slots fail (the table asks before each), and whether all of
// this thread's do.
std::atomic<int> maps_to_fail{0};
thread_local bool my_maps_fail = false;
bool allocation_table_map_fails() {
  if (my_maps_fail) return true;
  int n = maps_to_fail.load();
  while (n > 0 && !maps_to_fail.compare_exchange_weak(n, n - 1)) {
  }
  return n > 0;
}
}  // namespace slice::test
#endif

namespace slice {
namespace {

Charge charge(std::uint64_t bytes, std::uint64_t owner = 0, int device = 0) { return Charge{device, bytes, owner}; }

bool same(const std::optional<Charge>& a, const Charge& b) {
  return a && a->device == b.device && a->bytes == b.bytes && a->owner == b.owner;
}

// Keys as the driver hands them out: device pointers aligned to 512 bytes or more, and handles.
std::uint64_t pointer_key(std::uint64_t i) { return 0x7f0000000000ull + i * 0x200000ull; }

TEST(AllocationTable, InsertFindTakeAndOverwrite) {
  AllocationTable t;
  EXPECT_EQ(t.size(), 0u);
  EXPECT_FALSE(t.take(pointer_key(1)));
  EXPECT_FALSE(t.find(pointer_key(1)));
  EXPECT_FALSE(t.insert(pointer_key(1), charge(100, 7, 1)));
  EXPECT_TRUE(same(t.find(pointer_key(1)), charge(100, 7, 1)));
  EXPECT_EQ(t.size(), 1u);
  // Present: overwritten, and the old charge comes back.
  EXPECT_TRUE(same(t.insert(pointer_key(1), charge(200, 8, 2)), charge(100, 7, 1)));
  EXPECT_TRUE(same(t.find(pointer_key(1)), charge(200, 8, 2)));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(same(t.take(pointer_key(1)), charge(200, 8, 2)));
  EXPECT_FALSE(t.take(pointer_key(1)));
  EXPECT_FALSE(t.find(pointer_key(1)));
  EXPECT_EQ(t.size(), 0u);
  // Reinserted after a take: a new entry.
  EXPECT_FALSE(t.insert(pointer_key(1), charge(300)));
  EXPECT_TRUE(same(t.take(pointer_key(1)), charge(300)));
  EXPECT_EQ(t.overflow_size(), 0u);
}

TEST(AllocationTable, EveryKeyValueWorksZeroAndAllOnesIncluded) {
  AllocationTable t;
  const std::uint64_t keys[] = {0, 1, ~0ull, ~0ull - 1, 1ull << 63, 0x1000};
  for (std::uint64_t k : keys) EXPECT_FALSE(t.insert(k, charge(k ^ 5))) << k;
  for (std::uint64_t k : keys) EXPECT_TRUE(same(t.find(k), charge(k ^ 5))) << k;
  EXPECT_TRUE(same(t.insert(0, charge(9)), charge(5)));
  EXPECT_EQ(t.size(), std::size(keys));
  for (std::uint64_t k : keys) EXPECT_TRUE(t.take(k)) << k;
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.overflow_size(), 0u);
}

TEST(AllocationTable, TakeOwnedByAndCountOwnedBy) {
  for (std::size_t capacity : {std::size_t{8}, AllocationTable::kDefaultCapacity}) {
    AllocationTable t(capacity);
    for (std::uint64_t i = 0; i < 300; ++i) t.insert(pointer_key(i), charge(i, i % 3 + 1));
    EXPECT_EQ(t.count_owned_by(1), 100u);
    EXPECT_EQ(t.count_owned_by(2), 100u);
    EXPECT_EQ(t.count_owned_by(4), 0u);
    std::vector<Charge> taken = t.take_owned_by(2);
    ASSERT_EQ(taken.size(), 100u);
    std::vector<std::uint64_t> bytes;
    for (const Charge& c : taken) {
      EXPECT_EQ(c.owner, 2u);
      bytes.push_back(c.bytes);
    }
    std::sort(bytes.begin(), bytes.end());
    for (std::uint64_t i = 0; i < 100; ++i) EXPECT_EQ(bytes[i], 3 * i + 1);
    EXPECT_EQ(t.count_owned_by(2), 0u);
    EXPECT_TRUE(t.take_owned_by(2).empty());
    EXPECT_EQ(t.size(), 200u);
    EXPECT_FALSE(t.find(pointer_key(1)));
    EXPECT_TRUE(same(t.find(pointer_key(0)), charge(0, 1)));
    // An overwrite moves an entry to its new owner.
    t.insert(pointer_key(0), charge(0, 2));
    EXPECT_EQ(t.count_owned_by(1), 99u);
    EXPECT_EQ(t.take_owned_by(2).size(), 1u);
  }
}

TEST(AllocationTable, ASmallTableOverflowsAndComesBack) {
  AllocationTable t(8);  // a window of 8 slots: the 9th entry goes to the overflow
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_FALSE(t.insert(pointer_key(i), charge(i)));
  EXPECT_EQ(t.size(), 100u);
  EXPECT_EQ(t.overflow_size(), 92u);
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_TRUE(same(t.find(pointer_key(i)), charge(i))) << i;
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_TRUE(same(t.insert(pointer_key(i), charge(i + 1)), charge(i))) << i;
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_TRUE(same(t.take(pointer_key(i)), charge(i + 1))) << i;
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.overflow_size(), 0u);
  // The slots freed are reused: as many entries as slots, again and again, never overflow.
  for (int round = 0; round < 50; ++round) {
    for (std::uint64_t i = 0; i < 8; ++i) EXPECT_FALSE(t.insert(pointer_key(round * 8 + i), charge(i)));
    EXPECT_EQ(t.overflow_size(), 0u);
    for (std::uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(same(t.take(pointer_key(round * 8 + i)), charge(i)));
  }
}

TEST(AllocationTable, ManyLiveEntriesStayOutOfTheOverflow) {
  AllocationTable t;
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> keys(20000);
  for (std::uint64_t i = 0; i < keys.size(); ++i) keys[i] = i % 2 ? pointer_key(i) : rng() & ~0xFull;
  for (std::uint64_t i = 0; i < keys.size(); ++i) t.insert(keys[i], charge(i));
  EXPECT_EQ(t.size(), keys.size());
  EXPECT_EQ(t.overflow_size(), 0u);
  // Churn: a free and an allocation of a new address, many times over.
  for (std::uint64_t n = 0; n < 200000; ++n) {
    const std::size_t i = rng() % keys.size();
    ASSERT_TRUE(same(t.take(keys[i]), charge(i))) << n;
    keys[i] = rng() & ~0xFull;
    ASSERT_FALSE(t.insert(keys[i], charge(i))) << n;
  }
  EXPECT_EQ(t.size(), keys.size());
  EXPECT_EQ(t.overflow_size(), 0u);
}

std::int64_t mapped_pages() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t pages = 0;
  statm >> pages;
  return pages;
}

TEST(AllocationTable, NothingIsReservedBeforeTheFirstInsert) {
  const std::int64_t before = mapped_pages();
  auto t = std::make_unique<AllocationTable>();
  EXPECT_FALSE(t->take(1));
  EXPECT_FALSE(t->find(1));
  EXPECT_TRUE(t->take_owned_by(1).empty());
  EXPECT_EQ(t->count_owned_by(1), 0u);
  EXPECT_EQ(t->size(), 0u);
  const std::int64_t slots_pages = AllocationTable::kDefaultCapacity * 40 / 4096;
  EXPECT_LT(mapped_pages() - before, slots_pages / 4);
  t->insert(1, charge(1));
  EXPECT_GE(mapped_pages() - before, slots_pages * 3 / 4);
  t.reset();
  EXPECT_LT(mapped_pages() - before, slots_pages / 4);
}

// Slots that cannot be mapped (more bytes than any address space, so mmap fails, MAP_NORESERVE or
// not): the locked path holds everything, and does all the rest.
TEST(AllocationTable, WithoutSlotsTheLockedPathHoldsEverything) {
  AllocationTable t(std::size_t{1} << 57);
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_FALSE(t.insert(pointer_key(i), charge(i, i % 2 + 1)));
  EXPECT_EQ(t.size(), 100u);
  EXPECT_EQ(t.overflow_size(), 100u);
  EXPECT_TRUE(same(t.find(pointer_key(3)), charge(3, 2)));
  EXPECT_TRUE(same(t.insert(pointer_key(3), charge(4, 2)), charge(3, 2)));
  EXPECT_EQ(t.count_owned_by(1), 50u);
  EXPECT_EQ(t.take_owned_by(1).size(), 50u);
  for (std::uint64_t i = 1; i < 100; i += 2) EXPECT_TRUE(t.take(pointer_key(i))) << i;
  EXPECT_EQ(t.size(), 0u);
}

#ifdef SLICE_ALLOCATION_TABLE_RACES
// Once the mmap of the slots failed, it is never tried again: one failure, and every entry after it
// goes to the overflow (a second try would map the slots).
TEST(AllocationTable, AFailedMapIsNotTriedAgain) {
  AllocationTable t;
  test::maps_to_fail = 1;
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_FALSE(t.insert(pointer_key(i), charge(i)));
  EXPECT_EQ(test::maps_to_fail.load(), 0);
  EXPECT_EQ(t.overflow_size(), 100u);
  EXPECT_EQ(t.size(), 100u);
  for (std::uint64_t i = 0; i < 100; ++i) EXPECT_TRUE(same(t.take(pointer_key(i)), charge(i)));
  EXPECT_EQ(t.size(), 0u);
}

// Threads insert one key into a new table at once, and one thread's mmaps fail (that thread
// sometimes a little late): they agree on whether there are slots, so the key is there once (never
// in the slots and in the overflow).
TEST(AllocationTableStress, ThreadsWhoseMapsFailAgreeWhereAKeyIs) {
  constexpr int kThreads = 6, kRounds = 1000;
  std::unique_ptr<AllocationTable> t;
  std::vector<std::optional<Charge>> got(kThreads);
  int round = -1, failures = 0;
  auto between_rounds = [&]() noexcept {
    if (round >= 0) {
      const auto absent = std::count_if(got.begin(), got.end(), [](const auto& c) { return !c; });
      if (absent != 1 || t->size() != 1 || !t->take(pointer_key(1)) || t->take(pointer_key(1))) failures++;
    }
    ++round;
    t = std::make_unique<AllocationTable>();
  };
  std::barrier sync(kThreads, between_rounds);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      test::my_maps_fail = th == 0;
      std::mt19937 rng(th);
      for (int r = 0; r < kRounds; ++r) {
        sync.arrive_and_wait();
        if (th == 0 && r % 2 == 1)
          for (unsigned i = rng() % 20000; i > 0; --i) std::atomic_signal_fence(std::memory_order_seq_cst);
        got[th] = t->insert(pointer_key(1), charge(std::uint64_t(r) * kThreads + th + 1));
      }
      sync.arrive_and_wait();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0);
}
#endif

// Threads insert and take keys of their own (each key reinserted too), all at once: every take
// gets exactly what was inserted under that key.
void distinct_keys_stress(std::size_t capacity) {
  AllocationTable t(capacity);
  constexpr int kThreads = 8, kKeys = 200, kRounds = 300;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937 rng(th);
      auto key = [&](int i) { return pointer_key(std::uint64_t(th) * kKeys + i); };
      for (int r = 0; r < kRounds; ++r) {
        for (int i = 0; i < kKeys; ++i)
          if (t.insert(key(i), charge(r * 1000 + i, th))) failures++;
        // Reinserted: the previous charge comes back.
        for (int i = 0; i < kKeys; i += 7)
          if (!same(t.insert(key(i), charge(r * 1000 + i + 1, th)), charge(r * 1000 + i, th))) failures++;
        for (int i = 0; i < kKeys; ++i) {
          const std::uint64_t want = r * 1000 + i + (i % 7 == 0);
          if (rng() % 4 == 0 && !same(t.find(key(i)), charge(want, th))) failures++;
          if (!same(t.take(key(i)), charge(want, th))) failures++;
          if (t.take(key(i))) failures++;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(t.overflow_size(), 0u);
}

TEST(AllocationTableStress, ThreadsWithKeysOfTheirOwn) { distinct_keys_stress(AllocationTable::kDefaultCapacity); }
TEST(AllocationTableStress, ThreadsWithKeysOfTheirOwnInATableThatOverflows) { distinct_keys_stress(512); }

// Threads fight over a few keys (inserts, takes, finds, and take_owned_by of the owners they use),
// each charge marked by a number of its own in `bytes` and by its key in `device`. Every charge
// inserted must come back exactly once, under its own key: as the old charge of an insert, from a
// take, from take_owned_by, or from the table at the end.
void shared_keys_stress(std::size_t capacity, int keys) {
  AllocationTable t(capacity);
  constexpr int kThreads = 8, kOps = 40000;
  std::vector<std::atomic<int>> returned(std::size_t(kThreads) * kOps + 1);
  std::atomic<int> bad{0};
  auto valid = [&](const Charge& c, int key) {
    return c.bytes != 0 && c.bytes < returned.size() && c.owner == 1 + c.bytes % 3 && (key < 0 || c.device == key);
  };
  auto back = [&](const Charge& c, int key) {
    if (!valid(c, key)) {
      bad++;
      return;
    }
    returned[c.bytes]++;
  };
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      std::mt19937 rng(100 + th);
      for (int n = 0; n < kOps; ++n) {
        const std::uint64_t id = std::uint64_t(th) * kOps + n + 1;
        const int k = static_cast<int>(rng() % keys);
        const std::uint64_t key = pointer_key(k);
        switch (rng() % 10) {
          case 0:
            if (const auto c = t.find(key); c && !valid(*c, k)) bad++;
            break;
          case 1:
            if (rng() % 50 == 0)
              for (const Charge& c : t.take_owned_by(1 + rng() % 3)) back(c, -1);
            break;
          case 2:
          case 3:
          case 4:
          case 5:
            if (const auto c = t.take(key)) back(*c, k);
            break;
          default:
            if (const auto old = t.insert(key, Charge{k, id, 1 + id % 3})) back(*old, k);
            break;
        }
      }
    });
  }
  // Meanwhile, counting never disturbs anything. (What it counts is not checked here: a walk, not a
  // snapshot, it may count an entry taken and put back farther along twice.)
  std::atomic<bool> done{false};
  std::thread counter([&] {
    while (!done.load()) {
      t.count_owned_by(1);
      std::this_thread::yield();
    }
  });
  for (auto& th : threads) th.join();
  done = true;
  counter.join();
  // What is left, counted with nothing else running: one entry per key at most.
  EXPECT_LE(t.size(), std::size_t(keys));
  EXPECT_EQ(t.count_owned_by(1) + t.count_owned_by(2) + t.count_owned_by(3), t.size());
  for (int k = 0; k < keys; ++k)
    if (const auto c = t.take(pointer_key(k))) back(*c, k);
  EXPECT_EQ(t.size(), 0u);
  EXPECT_EQ(bad.load(), 0);
  // Every id that was inserted came back exactly once; ids never inserted (the other operations)
  // never came back.
  int twice = 0, lost = 0;
  for (int th = 0; th < kThreads; ++th) {
    std::mt19937 rng(100 + th);  // replays which ids were inserts
    for (int n = 0; n < kOps; ++n) {
      const std::uint64_t id = std::uint64_t(th) * kOps + n + 1;
      rng();  // the key
      const unsigned op = rng() % 10;
      if (op == 1 && rng() % 50 == 0) rng();  // take_owned_by's owner
      const int want = op >= 6 ? 1 : 0;
      if (returned[id].load() > want) twice++;
      if (returned[id].load() < want) lost++;
    }
  }
  EXPECT_EQ(twice, 0);
  EXPECT_EQ(lost, 0);
}

// Rounds, each begun at a barrier: threads insert one same key at once, and nothing else takes it.
// The key is never there twice: exactly one insert finds it absent, each other gets back a charge
// inserted in the round (each once), the table holds it once, and one take empties it. (The stress
// tests above cannot tell: a key there twice still gives every charge back once.) `crowded`: a
// table of 8 slots, full of other keys, one of which another thread takes meanwhile, so that the
// inserts meet a full window (the overflow) and a slot freed in it at once.
void same_key_rounds(bool crowded) {
  constexpr int kThreads = 6, kRounds = 2000, kFillers = 8;
  AllocationTable t(crowded ? kFillers : AllocationTable::kDefaultCapacity);
  const auto id = [](int round, int th) { return std::uint64_t(round) * kThreads + th + 1; };
  const auto key = [](int round) { return pointer_key(round % 5); };
  const auto filler = [](int i) { return pointer_key(1000 + i); };
  std::vector<std::optional<Charge>> got(kThreads);  // each inserter's; the taker's last
  std::optional<Charge> freed;
  // The barrier's completion (one thread, the others waiting) checks the round just run and sets
  // up the next.
  int round = -1, failures = 0;
  std::string first;
  auto fail = [&](const std::string& what) {
    if (failures++ == 0) first = "round " + std::to_string(round) + ": " + what;
  };
  auto between_rounds = [&]() noexcept {
    if (round >= 0) {
      std::vector<bool> back(kThreads, false);
      int absent = 0;
      for (int th = 0; th < kThreads; ++th) {
        if (!got[th]) {
          ++absent;
          continue;
        }
        const std::uint64_t b = got[th]->bytes;
        if (b < id(round, 0) || b > id(round, kThreads - 1) || b == id(round, th) || got[th]->owner != 1 ||
            back[b - id(round, 0)])
          fail("insert " + std::to_string(th) + " got back a charge it should not: " + std::to_string(b));
        else
          back[b - id(round, 0)] = true;
      }
      if (absent != 1) fail(std::to_string(absent) + " inserts found the key absent");
      if (t.size() != (crowded ? kFillers : 1)) fail("size " + std::to_string(t.size()) + " (a key there twice?)");
      const std::optional<Charge> last = t.take(key(round));
      if (!last || last->bytes < id(round, 0) || last->bytes > id(round, kThreads - 1) ||
          back[last->bytes - id(round, 0)])
        fail("the take did not get the charge that no insert got back");
      if (t.take(key(round))) fail("a second take found the key");
      if (crowded) {
        if (!same(freed, charge(round % kFillers))) fail("the filler taken meanwhile came back wrong");
        for (int i = 0; i < kFillers; ++i)
          if (i != round % kFillers && !same(t.take(filler(i)), charge(i))) fail("filler " + std::to_string(i));
      }
      if (t.size() != 0 || t.overflow_size() != 0) fail("not empty at the end");
    }
    ++round;
    if (crowded && round < kRounds)
      for (int i = 0; i < kFillers; ++i) t.insert(filler(i), charge(i));  // every slot, none in the overflow
  };
  std::barrier sync(kThreads + (crowded ? 1 : 0), between_rounds);
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads + (crowded ? 1 : 0); ++th) {
    threads.emplace_back([&, th] {
      std::mt19937 rng(th);
      for (int r = 0; r < kRounds; ++r) {
        sync.arrive_and_wait();
        if (th < kThreads) {
          got[th] = t.insert(key(r), Charge{0, id(r, th), 1});
        } else {
          // The taker: now at once, or a little later, to land among the inserts' steps.
          for (unsigned i = rng() % 3 == 0 ? 0 : rng() % 2000; i > 0; --i)
            std::atomic_signal_fence(std::memory_order_seq_cst);
          if (rng() % 4 == 0) std::this_thread::yield();
          freed = t.take(filler(r % kFillers));
        }
      }
      sync.arrive_and_wait();  // the last round's check
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, 0) << "first: " << first;
}

TEST(AllocationTableStress, OneKeyInsertedByManyAtOnceIsThereOnce) { same_key_rounds(false); }
TEST(AllocationTableStress, OneKeyInsertedByManyAtOnceWhileItsWindowIsFullAndASlotFrees) { same_key_rounds(true); }

TEST(AllocationTableStress, ThreadsFightOverAFewKeys) { shared_keys_stress(AllocationTable::kDefaultCapacity, 16); }
TEST(AllocationTableStress, ThreadsFightOverOneKey) { shared_keys_stress(AllocationTable::kDefaultCapacity, 1); }
TEST(AllocationTableStress, ThreadsFightOverKeysInATableThatOverflows) { shared_keys_stress(8, 24); }

// take_owned_by while other threads insert and take entries of the same owner and of others: each
// entry is taken once, by one or the other, and none of another owner is taken.
TEST(AllocationTableStress, TakeOwnedByWhileOthersInsert) {
  AllocationTable t;
  constexpr int kThreads = 6, kPerThread = 5000;
  std::atomic<std::uint64_t> taken_by_walk{0}, taken_by_take{0}, wrong_owner{0};
  std::atomic<bool> done{false};
  std::thread walker([&] {
    while (!done.load())
      for (const Charge& c : t.take_owned_by(1)) {
        taken_by_walk += c.bytes;
        if (c.owner != 1) wrong_owner++;
      }
  });
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th) {
    threads.emplace_back([&, th] {
      for (int i = 0; i < kPerThread; ++i) {
        const std::uint64_t key = pointer_key(std::uint64_t(th) * kPerThread + i);
        const std::uint64_t owner = 1 + (i % 2);
        t.insert(key, charge(1, owner));
        if (i % 3 == 0)
          if (const auto c = t.take(key)) {
            if (c->owner == 1)
              taken_by_take += c->bytes;
            else
              t.insert(key, *c);  // owner 2's stay
          }
      }
    });
  }
  for (auto& th : threads) th.join();
  done = true;
  walker.join();
  for (const Charge& c : t.take_owned_by(1)) taken_by_walk += c.bytes;
  EXPECT_EQ(wrong_owner.load(), 0u);
  EXPECT_EQ(taken_by_walk.load() + taken_by_take.load(), std::uint64_t(kThreads) * kPerThread / 2);
  EXPECT_EQ(t.count_owned_by(2), std::size_t(kThreads) * kPerThread / 2);
  EXPECT_EQ(t.size(), std::size_t(kThreads) * kPerThread / 2);
}

}  // namespace
}  // namespace slice
