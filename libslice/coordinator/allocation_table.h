// What this process holds, by the driver's handle: a device pointer (plain or stream-ordered), an
// array, a context. Each entry says which device it is charged to and how many bytes, so that a free gives
// back exactly what the allocation took.
//
// An open-addressing hash table that takes no lock and allocates nothing on its common path (an
// allocation's insert, a free's take): a free is a few loads and one compare-and-swap, however many
// allocations are live (HAMi-core's list walk costs 26-39 µs with 10,000 live).
//
// - Slots: an array of `capacity` slots (a power of two), reserved with mmap at the first insert, so
//   a process that never allocates reserves nothing, and only the pages that entries land on are
//   ever touched (at most capacity x 40 bytes: 2.5 MiB by default). With transparent huge pages on
//   ("always"), a first touch may make a whole 2 MiB page resident, most of the default table. A
//   bitmap of the blocks of slots entries were ever put in keeps the rare walks (a context's
//   destroy) off the others. Should that mmap fail, it is never tried again: the locked path holds
//   everything from then on.
// - Place: an entry lives within a window of kWindow slots from its home slot (the key's hash), at
//   the first free slot there when it was inserted; a freed slot is reused by the next insert that
//   passes it. Each home slot keeps its `reach`, the farthest distance at which an entry of that
//   home was ever put, so a look-up reads the slots from home up to reach only (no tombstones to
//   wade through: reach depends on how full the neighbourhood once was, not on how many came and
//   went).
// - Claims: an insert takes a free slot by compare-and-swap of its key word (0 -> key), writes the
//   charge, then publishes it (state live). Between the two it reads the slots from home to reach
//   again: two inserts of one key that ran at once see each other (each claims, then reads; a
//   sequentially consistent order makes the later one see the earlier), and each that saw the
//   other backs off to the locked path, so a key is never in the table twice.
// - Entries: a take, an overwrite and a find own a live entry for a moment by compare-and-swap of
//   its state (live -> busy); so does count_owned_by. So find and count_owned_by write to the slots
//   though they are const (nothing they leave changed). Operations on one key are ordered (a thread
//   that meets its key busy waits, spinning, then yielding, then sleeping, a few stores long); on
//   distinct keys they do not wait for each other (but for the instant one owns a slot that it then
//   finds reused for another key).
// - The locked path (a mutex, and an std::unordered_map for what does not fit): key 0 (the key word's
//   "free"), an insert that met another of the same key under way, and an insert whose window is
//   full (tens of thousands of live entries). While anything is in the overflow, every insert takes
//   the locked path and a look-up that misses the slots looks there too: a table that full works
//   as the old locked one did; one that is not costs one load for it. A known limit: one entry
//   left in the overflow (a key 0, or a neighbourhood once full) keeps every insert on the lock
//   until it is taken.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

namespace slice {

struct Charge {
  int device = 0;           // index into the process's devices
  std::uint64_t bytes = 0;  // what the ledger was charged
  std::uint64_t owner = 0;  // what frees it wholesale when destroyed (a context), 0: nothing
};

class AllocationTable {
 public:
  static constexpr std::size_t kDefaultCapacity = std::size_t{1} << 16;
  static constexpr std::size_t kWindow = 64;  // slots from home an entry may lie (fewer in a smaller table)

  // `capacity`: slots, rounded up to a power of two, at least 8 (tests use small ones to fill it).
  explicit AllocationTable(std::size_t capacity = kDefaultCapacity);
  ~AllocationTable();
  AllocationTable(const AllocationTable&) = delete;
  AllocationTable& operator=(const AllocationTable&) = delete;

  // A key already present is overwritten (the driver handed the same handle out again, so the old
  // one was freed behind our back, e.g. by a context destroy); the old charge is returned so the
  // caller can give it back.
  std::optional<Charge> insert(std::uint64_t key, Charge charge);
  // Removes and returns the entry, if there is one.
  std::optional<Charge> take(std::uint64_t key);
  std::optional<Charge> find(std::uint64_t key) const;
  // size() and count_owned_by() are walks, not snapshots: with other threads at work, an entry taken
  // and put back farther along may be counted twice, or not at all. Exact when nothing else runs.
  std::size_t size() const;
  // Removes every entry of `owner` (its context was destroyed, which frees them) and returns them.
  // A walk of the slots entries were ever put in: for rare events only. Entries inserted while it
  // runs may or may not be taken; each entry is returned once, by this or by a take. Out of memory
  // for the vector, it returns what it took so far and leaves the rest in the table.
  std::vector<Charge> take_owned_by(std::uint64_t owner);
  // How many entries `owner` has (a walk too).
  std::size_t count_owned_by(std::uint64_t owner) const;

  // For tests: entries in the locked overflow.
  std::size_t overflow_size() const;

 private:
  struct Slot {
    std::atomic<std::uint64_t> key;  // 0: free
    std::atomic<std::uint64_t> bytes;
    std::atomic<std::uint64_t> owner;
    std::atomic<std::uint32_t> state;  // kNotLive, kLive, kBusy (allocation_table.cpp)
    std::atomic<std::uint32_t> reach;  // as a home slot: the farthest distance of its entries
    std::atomic<std::int32_t> device;
  };
  static_assert(sizeof(Slot) == 40, "the 40 bytes a slot takes, as the comments above say");
  // How a look-up met its key: the slot, and what it saw there.
  struct Seen {
    Slot* slot = nullptr;
    std::uint32_t state = 0;
  };

  // What slots_ holds once mmap failed: never a slot's address (misaligned).
  static Slot* no_slots() { return reinterpret_cast<Slot*>(std::uintptr_t{1}); }
  Slot* slots() const {
    Slot* s = slots_.load(std::memory_order_acquire);
    return s == no_slots() ? nullptr : s;
  }
  Slot* ensure_slots() {
    Slot* s = slots_.load(std::memory_order_acquire);
    if (s == nullptr) return map_slots();
    return s == no_slots() ? nullptr : s;
  }
  [[gnu::noinline]] Slot* map_slots();  // the first insert's: nullptr when mmap failed (for good)
  std::size_t mapped_bytes() const;
  // Which blocks of kBlockSlots slots an entry was ever put in: a bitmap after the slots, so that the
  // walks (take_owned_by, count_owned_by, size) read those blocks only, never the pages nothing
  // touched. A claim sets its block's bit (a load when it is set already) before it publishes.
  static constexpr std::size_t kBlockSlots = 64;
  std::atomic<std::uint64_t>* block_bits(Slot* slots) const;
  template <typename Visit>
  void for_each_used_slot(Slot* slots, Visit&& visit) const;
  // The steps of the common paths, inlined into them (only allocation_table.cpp uses them).
#define SLICE_TABLE_STEP [[gnu::always_inline]] inline
  SLICE_TABLE_STEP std::size_t home_of(std::uint64_t key) const;
  SLICE_TABLE_STEP Slot& at(Slot* slots, std::size_t home, std::size_t distance) const;
  // The slot of `key` within its home's reach, with the state seen (live, busy, or not live: an
  // insert or a take of it under way); no slot when the key is not there.
  SLICE_TABLE_STEP Seen look(Slot* slots, std::size_t home, std::uint64_t key) const;
  // Owns the live entry `seen` for a moment (true), or tells that it changed meanwhile (false).
  SLICE_TABLE_STEP static bool own(const Seen& seen, std::uint64_t key);
  SLICE_TABLE_STEP static Charge read(const Slot& s);
  SLICE_TABLE_STEP static void write(Slot& s, const Charge& c);
  SLICE_TABLE_STEP static void free_slot(Slot& s);
  // Claims a free slot in the window for `key` and writes `charge` there, unpublished; -1: none free.
  SLICE_TABLE_STEP long claim(Slot* slots, std::size_t home, std::uint64_t key, const Charge& charge);
  // After a claim at `distance`: true when no other slot within reach holds `key`.
  SLICE_TABLE_STEP bool alone(Slot* slots, std::size_t home, std::size_t distance, std::uint64_t key) const;
  // The insert without the lock; false when it must take the locked path (nothing changed then).
  SLICE_TABLE_STEP bool insert_fast(Slot* slots, std::uint64_t key, const Charge& charge, std::optional<Charge>& old);
#undef SLICE_TABLE_STEP
  // The locked path; out of line, so that the common paths stay short.
  [[gnu::noinline]] std::optional<Charge> insert_locked(std::uint64_t key, const Charge& charge);
  [[gnu::noinline]] std::optional<Charge> take_overflow(std::uint64_t key);

  std::size_t capacity_;
  std::size_t block_words_;  // of the bitmap
  std::size_t mask_;
  std::size_t window_;
  int shift_;
  // nullptr until the first insert maps the slots; then the slots, or no_slots() when mmap failed.
  mutable std::atomic<Slot*> slots_{nullptr};
  // Entries in the overflow, plus locked inserts about to put one there: while not 0, inserts take
  // the locked path and look-ups that miss the slots look in the overflow.
  mutable std::atomic<std::size_t> overflow_count_{0};
  mutable std::mutex mu_;  // the locked path: locked inserts, and the overflow
  std::unordered_map<std::uint64_t, Charge> overflow_;
};

}  // namespace slice
