// What this process holds, by the driver's handle: a device pointer, a VMM handle, an array, a
// context. Each entry says which device it is charged to and how many bytes, so that a free gives
// back exactly what the allocation took. A free is one hash look-up in one of many shards: no list
// walk, however many allocations are live (HAMi-core's walk costs 26-39 µs with 10,000 live).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace slice {

struct Charge {
  int device = 0;             // index into the process's devices
  std::uint64_t bytes = 0;    // what the ledger was charged
  std::uint64_t owner = 0;    // what frees it wholesale when destroyed (a context), 0: nothing
};

class AllocationTable {
 public:
  // A key already present is overwritten (the driver handed the same handle out again, so the old
  // one was freed behind our back, e.g. by a context destroy); the old charge is returned so the
  // caller can give it back.
  std::optional<Charge> insert(std::uint64_t key, Charge charge);
  // Removes and returns the entry, if there is one.
  std::optional<Charge> take(std::uint64_t key);
  std::optional<Charge> find(std::uint64_t key) const;
  std::size_t size() const;
  // Removes every entry of `owner` (its context was destroyed, which frees them) and returns them.
  // A walk of the whole table: for rare events only.
  std::vector<Charge> take_owned_by(std::uint64_t owner);
  // How many entries `owner` has (a walk too).
  std::size_t count_owned_by(std::uint64_t owner) const;

 private:
  static constexpr std::size_t kShards = 64;  // threads allocating at once rarely share a lock
  struct alignas(64) Shard {
    mutable std::mutex mu;
    std::unordered_map<std::uint64_t, Charge> entries;
  };
  Shard& shard_of(std::uint64_t key) const;
  mutable std::array<Shard, kShards> shards_;
};

}  // namespace slice
