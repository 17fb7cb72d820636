#include "procaddr_map.h"

#include <algorithm>
#include <iterator>

namespace slice {
namespace {

constexpr ProcAddrEntry kEntries[] = {
#define SLICE_PROCADDR_ENTRY(name, version, per_thread, export_symbol) \
  {name, version, (per_thread) != 0, #export_symbol},
#include "procaddr_table.inc"
#undef SLICE_PROCADDR_ENTRY
};

constexpr bool entry_less(const ProcAddrEntry& a, const ProcAddrEntry& b) {
  const std::string_view an{a.name}, bn{b.name};
  if (an != bn) return an < bn;
  if (a.version != b.version) return a.version < b.version;
  return a.per_thread < b.per_thread;
}

// Binary search and the newest-version scan below rely on this order; check it when compiling
// rather than trusting the generator.
static_assert(std::is_sorted(std::begin(kEntries), std::end(kEntries), entry_less),
              "procaddr_table.inc must be sorted by name, version, per_thread");

struct ByName {
  bool operator()(const ProcAddrEntry& e, std::string_view name) const { return std::string_view{e.name} < name; }
  bool operator()(std::string_view name, const ProcAddrEntry& e) const { return name < std::string_view{e.name}; }
};

constexpr unsigned long long kLegacyStream = 1;     // CU_GET_PROC_ADDRESS_LEGACY_STREAM
constexpr unsigned long long kPerThreadStream = 2;  // CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

}  // namespace

std::span<const ProcAddrEntry> procaddr_entries() { return kEntries; }

ProcAddrResolution resolve_procaddr(std::string_view name, int cuda_version, unsigned long long flags) {
  const auto [first, last] = std::equal_range(std::begin(kEntries), std::end(kEntries), name, ByName{});
  if (first == last) return {ProcAddrStatus::symbol_not_found, nullptr};

  // Entries of one name are sorted by version: the last of each kind at or below the request wins.
  const ProcAddrEntry* current = nullptr;
  const ProcAddrEntry* current_per_thread = nullptr;
  for (auto it = first; it != last && it->version <= cuda_version; ++it) {
    (it->per_thread ? current_per_thread : current) = &*it;
  }
  // The generator guarantees every per-thread entry has a default ABI at or before it.
  if (current == nullptr) return {ProcAddrStatus::version_not_sufficient, nullptr};

  // Flags 0 means the driver's default, which is the legacy stream; a caller built for per-thread
  // streams sets bit 1 itself (cuda.h's cuGetProcAddress_v2_ptsz wrapper does). Both bits at once
  // are contradictory: keep the default, as for 0.
  const bool want_per_thread = (flags & (kLegacyStream | kPerThreadStream)) == kPerThreadStream;
  // The twin must belong to the ABI the version selects: one older than `current` would hand a
  // per-thread caller an old argument layout, so fall back to the default symbol instead.
  if (want_per_thread && current_per_thread != nullptr && current_per_thread->version >= current->version) {
    return {ProcAddrStatus::found, current_per_thread->export_name};
  }
  return {ProcAddrStatus::found, current->export_name};
}

}  // namespace slice
