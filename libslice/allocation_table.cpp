#include "allocation_table.h"

namespace slice {

AllocationTable::Shard& AllocationTable::shard_of(std::uint64_t key) const {
  // Device pointers share their low bits (alignment) and handles their high bits: mix both.
  std::uint64_t h = key * 0x9E3779B97F4A7C15ull;
  return shards_[(h >> 58) % kShards];
}

std::optional<Charge> AllocationTable::insert(std::uint64_t key, Charge charge) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lock(s.mu);
  auto [it, inserted] = s.entries.try_emplace(key, charge);
  if (inserted) return std::nullopt;
  const Charge old = it->second;
  it->second = charge;
  return old;
}

std::optional<Charge> AllocationTable::take(std::uint64_t key) {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lock(s.mu);
  const auto it = s.entries.find(key);
  if (it == s.entries.end()) return std::nullopt;
  const Charge c = it->second;
  s.entries.erase(it);
  return c;
}

std::optional<Charge> AllocationTable::find(std::uint64_t key) const {
  Shard& s = shard_of(key);
  std::lock_guard<std::mutex> lock(s.mu);
  const auto it = s.entries.find(key);
  if (it == s.entries.end()) return std::nullopt;
  return it->second;
}

std::vector<Charge> AllocationTable::take_owned_by(std::uint64_t owner) {
  std::vector<Charge> taken;
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    std::erase_if(s.entries, [&](const auto& entry) {
      if (entry.second.owner != owner) return false;
      taken.push_back(entry.second);
      return true;
    });
  }
  return taken;
}

std::size_t AllocationTable::count_owned_by(std::uint64_t owner) const {
  std::size_t n = 0;
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    for (const auto& entry : s.entries) n += entry.second.owner == owner;
  }
  return n;
}

std::size_t AllocationTable::size() const {
  std::size_t n = 0;
  for (Shard& s : shards_) {
    std::lock_guard<std::mutex> lock(s.mu);
    n += s.entries.size();
  }
  return n;
}

}  // namespace slice
