#include "allocation_table.h"

#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include <algorithm>
#include <bit>
#include <new>

// A test build (tests/unit/allocation_table_test.cpp, allocation_table_race_test) widens the windows
// between the steps below, where other threads' steps may come in, so that its stress tests meet
// the interleavings that are rare on a real machine. Nothing in any other build.
#ifdef SLICE_ALLOCATION_TABLE_RACES
namespace slice::test {
void allocation_table_race_point();
bool allocation_table_map_fails();  // true: this mmap fails (the test's way to make it fail)
}  // namespace slice::test
#define SLICE_RACE_POINT() ::slice::test::allocation_table_race_point()
#define SLICE_MAP_FAILS() ::slice::test::allocation_table_map_fails()
#else
#define SLICE_RACE_POINT() static_cast<void>(0)
#define SLICE_MAP_FAILS() false
#endif

namespace slice {

namespace {

// A slot's state. A free slot (key 0) is always kNotLive: a take marks a slot not live before it
// frees the key, and a claim finds it so.
constexpr std::uint32_t kNotLive = 0;  // free; or claimed by an insert not published yet; or being freed
constexpr std::uint32_t kLive = 1;     // an entry
constexpr std::uint32_t kBusy = 2;     // an entry that a take, an overwrite or a find owns for a moment

// Waiting for another thread's few stores: spin, then yield (it may have been preempted), then
// sleep. Yielding alone could wait forever: a SCHED_FIFO thread yields only to threads of its own
// priority, so a lower-priority owner preempted on the same CPU would never run again.
void backoff(int& spins) {
  if (spins < 100) {
    ++spins;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
  } else if (spins < 200) {
    ++spins;
    sched_yield();
  } else {
    // 50 µs, doubling up to 1 ms: short, since the owner is a few stores from done once it runs.
    const int doublings = spins - 200;
    if (doublings < 5) ++spins;
    const timespec pause{0, std::min(50'000L << doublings, 1'000'000L)};
    nanosleep(&pause, nullptr);
  }
}

}  // namespace

AllocationTable::AllocationTable(std::size_t capacity)
    : capacity_(std::bit_ceil(std::max<std::size_t>(capacity, 8))),
      block_words_(((capacity_ + kBlockSlots - 1) / kBlockSlots + 63) / 64),
      mask_(capacity_ - 1),
      window_(std::min(kWindow, capacity_)),
      shift_(64 - std::countr_zero(capacity_)) {}

AllocationTable::~AllocationTable() {
  if (Slot* s = slots()) munmap(s, mapped_bytes());
}

std::size_t AllocationTable::mapped_bytes() const {
  return capacity_ * sizeof(Slot) + block_words_ * sizeof(std::uint64_t);
}

std::atomic<std::uint64_t>* AllocationTable::block_bits(Slot* slots) const {
  return reinterpret_cast<std::atomic<std::uint64_t>*>(slots + capacity_);
}

template <typename Visit>
void AllocationTable::for_each_used_slot(Slot* slots, Visit&& visit) const {
  const std::atomic<std::uint64_t>* bits = block_bits(slots);
  for (std::size_t w = 0; w < block_words_; ++w) {
    for (std::uint64_t word = bits[w].load(std::memory_order_acquire); word != 0; word &= word - 1) {
      const std::size_t first = (w * 64 + static_cast<std::size_t>(std::countr_zero(word))) * kBlockSlots;
      for (std::size_t i = first; i < std::min(first + kBlockSlots, capacity_); ++i) visit(slots[i]);
    }
  }
}

std::size_t AllocationTable::home_of(std::uint64_t key) const {
  // Fibonacci hashing: the top bits of the product depend on every bit of the key, so device
  // pointers (which share their low bits) and handles (which share their high bits) both spread.
  return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
}

AllocationTable::Slot& AllocationTable::at(Slot* slots, std::size_t home, std::size_t distance) const {
  return slots[(home + distance) & mask_];
}

AllocationTable::Slot* AllocationTable::map_slots() {
  // Zero pages: every slot free and not live, every reach 0, no block used. Only the pages entries
  // land on are ever touched (huge ones, with transparent huge pages always on).
  const std::size_t bytes = mapped_bytes();
  void* p = SLICE_MAP_FAILS()
                ? MAP_FAILED
                : mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  // A failure is recorded in slots_ itself, for good: no insert tries mmap again, and no thread can
  // put a key in slots that another, which saw the mmap fail, does not look in (the overflow would
  // then hold it too). The first outcome recorded is everyone's.
  Slot* mine = p == MAP_FAILED ? no_slots() : static_cast<Slot*>(p);
  Slot* expected = nullptr;
  if (!slots_.compare_exchange_strong(expected, mine, std::memory_order_acq_rel)) {
    if (p != MAP_FAILED) munmap(p, bytes);  // another thread's came first
    mine = expected;
  }
  return mine == no_slots() ? nullptr : mine;  // nullptr: the locked path holds everything
}

Charge AllocationTable::read(const Slot& s) {
  return Charge{s.device.load(std::memory_order_relaxed), s.bytes.load(std::memory_order_relaxed),
                s.owner.load(std::memory_order_relaxed)};
}

void AllocationTable::write(Slot& s, const Charge& c) {
  s.device.store(c.device, std::memory_order_relaxed);
  s.bytes.store(c.bytes, std::memory_order_relaxed);
  s.owner.store(c.owner, std::memory_order_relaxed);
}

void AllocationTable::free_slot(Slot& s) {
  s.state.store(kNotLive, std::memory_order_relaxed);
  SLICE_RACE_POINT();
  s.key.store(0, std::memory_order_release);  // after the state: a claim finds the slot not live
}

AllocationTable::Seen AllocationTable::look(Slot* slots, std::size_t home, std::uint64_t key) const {
  const std::uint32_t reach = slots[home].reach.load(std::memory_order_seq_cst);
  Seen not_live;
  for (std::size_t d = 0; d <= reach; ++d) {
    Slot& s = at(slots, home, d);
    if (s.key.load(std::memory_order_seq_cst) != key) continue;
    SLICE_RACE_POINT();
    const std::uint32_t state = s.state.load(std::memory_order_acquire);
    if (state != kNotLive) return {&s, state};
    // An insert of this key not published yet, or a take of it freeing the slot: no entry there,
    // but another slot may hold the entry (an insert that will find it and back off).
    if (not_live.slot == nullptr) not_live = {&s, kNotLive};
  }
  return not_live;
}

bool AllocationTable::own(const Seen& seen, std::uint64_t key) {
  std::uint32_t live = kLive;
  if (!seen.slot->state.compare_exchange_strong(live, kBusy, std::memory_order_acquire)) return false;
  if (seen.slot->key.load(std::memory_order_relaxed) == key) return true;
  seen.slot->state.store(kLive, std::memory_order_release);  // freed and reused for another key meanwhile
  return false;
}

long AllocationTable::claim(Slot* slots, std::size_t home, std::uint64_t key, const Charge& charge) {
  for (std::size_t d = 0; d < window_; ++d) {
    Slot& s = at(slots, home, d);
    std::uint64_t expected = 0;
    if (s.key.load(std::memory_order_relaxed) != 0 ||
        !s.key.compare_exchange_strong(expected, key, std::memory_order_seq_cst))
      continue;
    SLICE_RACE_POINT();
    write(s, charge);
    // Its block is walked from now on (before it is published: a walk that starts after sees it).
    const std::size_t index = static_cast<std::size_t>(&s - slots);
    std::atomic<std::uint64_t>& bits = block_bits(slots)[index / kBlockSlots / 64];
    const std::uint64_t bit = std::uint64_t{1} << (index / kBlockSlots % 64);
    if ((bits.load(std::memory_order_relaxed) & bit) == 0) bits.fetch_or(bit, std::memory_order_seq_cst);
    SLICE_RACE_POINT();
    // Reach covers the claim before it is published or checked: every look-up from now on reads
    // this slot.
    std::atomic<std::uint32_t>& reach = slots[home].reach;
    std::uint32_t r = reach.load(std::memory_order_seq_cst);
    while (r < d && !reach.compare_exchange_weak(r, static_cast<std::uint32_t>(d), std::memory_order_seq_cst)) {
    }
    return static_cast<long>(d);
  }
  return -1;
}

bool AllocationTable::alone(Slot* slots, std::size_t home, std::size_t distance, std::uint64_t key) const {
  // Two inserts of one key that claimed at once: each claimed, then reads reach and the keys. In a
  // sequentially consistent order the one that reads reach later sees a reach that covers the
  // other's claim (raised before the other read it), and reads that slot after it was claimed.
  const std::uint32_t reach = slots[home].reach.load(std::memory_order_seq_cst);
  for (std::size_t d = 0; d <= reach; ++d)
    if (d != distance && at(slots, home, d).key.load(std::memory_order_seq_cst) == key) return false;
  return true;
}

bool AllocationTable::insert_fast(Slot* slots, std::uint64_t key, const Charge& charge, std::optional<Charge>& old) {
  if (overflow_count_.load(std::memory_order_relaxed) != 0) return false;
  const std::size_t home = home_of(key);
  if (const Seen seen = look(slots, home, key); seen.slot != nullptr) {
    // There already: overwritten in place. Busy, or an insert or a take of it under way: the
    // locked path waits for it.
    SLICE_RACE_POINT();
    if (seen.state != kLive || !own(seen, key)) return false;
    old = read(*seen.slot);
    write(*seen.slot, charge);
    seen.slot->state.store(kLive, std::memory_order_release);
    return true;
  }
  SLICE_RACE_POINT();
  const long d = claim(slots, home, key, charge);
  if (d < 0) return false;  // no free slot near its home: the overflow
  Slot& s = at(slots, home, static_cast<std::size_t>(d));
  SLICE_RACE_POINT();
  // Another insert of this key claimed too, or the overflow came into use (it may hold this key):
  // back off to the locked path. Checked after the claim, so a locked insert that announced an
  // overflow entry either is seen here or sees this claim.
  if (!alone(slots, home, static_cast<std::size_t>(d), key) || overflow_count_.load(std::memory_order_seq_cst) != 0) {
    free_slot(s);
    return false;
  }
  SLICE_RACE_POINT();
  s.state.store(kLive, std::memory_order_release);
  old.reset();
  return true;
}

std::optional<Charge> AllocationTable::insert_locked(std::uint64_t key, const Charge& charge) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot* slots = key != 0 ? ensure_slots() : nullptr;  // key 0 is "free" in a slot: always the overflow
  SLICE_RACE_POINT();
  const std::size_t home = home_of(key);
  for (int spins = 0;; backoff(spins)) {
    // Only inserts without the lock and takes run beside this: wait for theirs to finish.
    if (slots != nullptr) {
      if (const Seen seen = look(slots, home, key); seen.slot != nullptr) {
        if (seen.state == kLive && own(seen, key)) {
          const Charge old = read(*seen.slot);
          write(*seen.slot, charge);
          seen.slot->state.store(kLive, std::memory_order_release);
          return old;
        }
        continue;
      }
    }
    if (const auto it = overflow_.find(key); it != overflow_.end()) {
      const Charge old = it->second;
      it->second = charge;
      return old;
    }
    if (slots != nullptr) {
      if (const long d = claim(slots, home, key, charge); d >= 0) {
        Slot& s = at(slots, home, static_cast<std::size_t>(d));
        SLICE_RACE_POINT();
        if (!alone(slots, home, static_cast<std::size_t>(d), key)) {
          free_slot(s);  // an insert without the lock claimed it as well: see what it does
          continue;
        }
        s.state.store(kLive, std::memory_order_release);
        return std::nullopt;
      }
    }
    // No free slot near its home: the overflow. Announced first, so that an insert without the lock
    // that claims this key from now on backs off, and one that claimed it already is seen here.
    overflow_count_.fetch_add(1, std::memory_order_seq_cst);
    SLICE_RACE_POINT();
    if (slots != nullptr && look(slots, home, key).slot != nullptr) {
      overflow_count_.fetch_sub(1, std::memory_order_seq_cst);
      continue;
    }
    try {
      overflow_.emplace(key, charge);
    } catch (...) {
      overflow_count_.fetch_sub(1, std::memory_order_seq_cst);
      throw;
    }
    return std::nullopt;
  }
}

std::optional<Charge> AllocationTable::insert(std::uint64_t key, Charge charge) {
  if (key != 0) {
    if (Slot* slots = ensure_slots()) {
      std::optional<Charge> old;
      if (insert_fast(slots, key, charge, old)) return old;
    }
  }
  return insert_locked(key, charge);
}

std::optional<Charge> AllocationTable::take_overflow(std::uint64_t key) {
  if (overflow_count_.load(std::memory_order_seq_cst) == 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = overflow_.find(key);
  if (it == overflow_.end()) return std::nullopt;
  const Charge c = it->second;
  overflow_.erase(it);
  overflow_count_.fetch_sub(1, std::memory_order_seq_cst);
  return c;
}

std::optional<Charge> AllocationTable::take(std::uint64_t key) {
  if (Slot* slots = key != 0 ? this->slots() : nullptr) {
    const std::size_t home = home_of(key);
    for (int spins = 0;; backoff(spins)) {
      const Seen seen = look(slots, home, key);
      if (seen.slot == nullptr || seen.state == kNotLive) break;  // not there (yet)
      SLICE_RACE_POINT();
      if (seen.state == kLive && own(seen, key)) {
        const Charge c = read(*seen.slot);
        free_slot(*seen.slot);
        return c;
      }
      // Busy (another thread's take, overwrite or find of this key), or it changed: look again.
    }
  }
  return take_overflow(key);
}

std::optional<Charge> AllocationTable::find(std::uint64_t key) const {
  if (Slot* slots = key != 0 ? this->slots() : nullptr) {
    const std::size_t home = home_of(key);
    for (int spins = 0;; backoff(spins)) {
      const Seen seen = look(slots, home, key);
      if (seen.slot == nullptr || seen.state == kNotLive) break;
      if (seen.state == kLive && own(seen, key)) {
        const Charge c = read(*seen.slot);
        seen.slot->state.store(kLive, std::memory_order_release);
        return c;
      }
    }
  }
  if (overflow_count_.load(std::memory_order_seq_cst) == 0) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = overflow_.find(key);
  if (it == overflow_.end()) return std::nullopt;
  return it->second;
}

std::vector<Charge> AllocationTable::take_owned_by(std::uint64_t owner) {
  std::vector<Charge> taken;
  // Room for one more, made before an entry is owned: a bad_alloc then leaves the entry where it
  // was. Should memory run out, the walk stops and returns what it took; the rest stay in the table
  // (no charge is lost, none is returned twice).
  bool out_of_memory = false;
  auto room = [&](std::size_t more) {
    if (!out_of_memory && taken.capacity() - taken.size() < more) {
      try {
        taken.reserve(std::max(taken.size() + more, 2 * taken.capacity()));
      } catch (const std::bad_alloc&) {
        out_of_memory = true;
      }
    }
    return !out_of_memory;
  };
  if (Slot* slots = this->slots()) {
    for_each_used_slot(slots, [&](Slot& s) {
      for (int spins = 0;;) {
        std::uint32_t state = s.state.load(std::memory_order_acquire);
        if (state == kBusy) {  // its owner may be being changed: wait for the outcome
          backoff(spins);
          continue;
        }
        if (state != kLive || s.owner.load(std::memory_order_relaxed) != owner || !room(1)) break;
        if (!s.state.compare_exchange_weak(state, kBusy, std::memory_order_acquire)) continue;
        if (s.owner.load(std::memory_order_relaxed) != owner) {
          s.state.store(kLive, std::memory_order_release);
          break;
        }
        taken.push_back(read(s));  // cannot throw: room was made
        free_slot(s);
        break;
      }
    });
  }
  if (overflow_count_.load(std::memory_order_seq_cst) != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!room(overflow_.size())) return taken;  // so that no push_back below throws
    const std::size_t erased = std::erase_if(overflow_, [&](const auto& entry) {
      if (entry.second.owner != owner) return false;
      taken.push_back(entry.second);
      return true;
    });
    overflow_count_.fetch_sub(erased, std::memory_order_seq_cst);
  }
  return taken;
}

std::size_t AllocationTable::count_owned_by(std::uint64_t owner) const {
  std::size_t n = 0;
  if (Slot* slots = this->slots()) {
    for_each_used_slot(slots, [&](Slot& s) {
      for (int spins = 0;;) {
        std::uint32_t state = s.state.load(std::memory_order_acquire);
        if (state == kBusy) {
          backoff(spins);
          continue;
        }
        if (state != kLive || s.owner.load(std::memory_order_relaxed) != owner) break;
        if (!s.state.compare_exchange_weak(state, kBusy, std::memory_order_acquire)) continue;
        n += s.owner.load(std::memory_order_relaxed) == owner;
        s.state.store(kLive, std::memory_order_release);
        break;
      }
    });
  }
  if (overflow_count_.load(std::memory_order_seq_cst) != 0) {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& entry : overflow_) n += entry.second.owner == owner;
  }
  return n;
}

std::size_t AllocationTable::size() const {
  std::size_t n = 0;
  if (Slot* slots = this->slots())
    for_each_used_slot(slots, [&](Slot& s) { n += s.state.load(std::memory_order_relaxed) != kNotLive; });
  return n + overflow_size();
}

std::size_t AllocationTable::overflow_size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return overflow_.size();
}

}  // namespace slice
