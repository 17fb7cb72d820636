#include "nvml_gate.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace {

// The count the program sees (low bits) and libslice's reference (kOwnBit). Read by the gates.
constexpr std::uint32_t kOwnBit = 0x80000000u;

}  // namespace

extern "C" {
// Read by the gates' assembly below: hidden, never exported.
__attribute__((visibility("hidden"))) constinit std::atomic<std::uint32_t> slice_nvml_view{0};
__attribute__((visibility("hidden"))) void* slice_nvml_gate_targets[slice::shim::kNvmlGates] = {};
__attribute__((visibility("hidden"))) extern const char slice_nvml_gates[];
}
static_assert(sizeof(std::atomic<std::uint32_t>) == 4 && std::atomic<std::uint32_t>::is_always_lock_free);

// Gate i: while slice_nvml_view is exactly kOwnBit (closed), NVML_ERROR_UNINITIALIZED (1); otherwise
// a tail jump to slice_nvml_gate_targets[i], arguments and return address untouched.
#if defined(__x86_64__)
#define SLICE_NVML_GATE_STRIDE 32
asm(R"(
  .text
  .hidden slice_nvml_gates
  .globl slice_nvml_gates
  .p2align 5
slice_nvml_gates:
  .set slice_nvml_gate_index, 0
  .rept 512
  .p2align 5
  cmpl $0x80000000, slice_nvml_view(%rip)
  je 1f
  jmp *(slice_nvml_gate_targets + 8 * slice_nvml_gate_index)(%rip)
1:
  movl $1, %eax
  ret
  .set slice_nvml_gate_index, slice_nvml_gate_index + 1
  .endr
)");
#elif defined(__aarch64__)
#define SLICE_NVML_GATE_STRIDE 64
asm(R"(
  .text
  .hidden slice_nvml_gates
  .globl slice_nvml_gates
  .p2align 6
slice_nvml_gates:
  .set slice_nvml_gate_index, 0
  .rept 512
  .p2align 6
  adrp x16, slice_nvml_view
  ldr w16, [x16, :lo12:slice_nvml_view]
  movz w17, #0x8000, lsl #16
  cmp w16, w17
  b.eq 1f
  adrp x16, slice_nvml_gate_targets + 8 * slice_nvml_gate_index
  ldr x16, [x16, :lo12:slice_nvml_gate_targets + 8 * slice_nvml_gate_index]
  br x16
1:
  mov w0, #1
  ret
  .set slice_nvml_gate_index, slice_nvml_gate_index + 1
  .endr
)");
#else
#error "libslice's NVML gates need assembly for this architecture"
#endif

namespace slice::shim {
namespace {

constinit std::atomic<const char*> g_names[kNvmlGates] = {};
constinit std::atomic<std::uint32_t> g_used{0};

bool answered_at_any_count(const char* name) { return std::strcmp(name, "nvmlErrorString") == 0; }

void* gate(std::size_t i) { return const_cast<char*>(slice_nvml_gates + i * SLICE_NVML_GATE_STRIDE); }

}  // namespace

void nvml_view_own_reference() noexcept { slice_nvml_view.fetch_or(kOwnBit); }
void nvml_view_program_init() noexcept { slice_nvml_view.fetch_add(1); }

bool nvml_view_program_shutdown() noexcept {
  std::uint32_t v = slice_nvml_view.load();
  while ((v & ~kOwnBit) != 0) {
    if (slice_nvml_view.compare_exchange_weak(v, v - 1)) return true;
  }
  return false;
}

bool nvml_view_closed() noexcept { return slice_nvml_view.load(std::memory_order_relaxed) == kOwnBit; }

void* nvml_gate_for(const char* name, void* function) noexcept {
  if (name == nullptr || function == nullptr || answered_at_any_count(name)) return function;
  const std::uint32_t used = std::min<std::uint32_t>(g_used.load(std::memory_order_acquire), kNvmlGates);
  for (std::uint32_t i = 0; i < used; ++i) {
    const char* n = g_names[i].load(std::memory_order_acquire);
    if (n != nullptr && std::strcmp(n, name) == 0 &&
        __atomic_load_n(&slice_nvml_gate_targets[i], __ATOMIC_ACQUIRE) == function)
      return gate(i);
  }
  const std::uint32_t i = g_used.fetch_add(1);
  if (i >= kNvmlGates) return function;  // none left: the function itself (never more than NVML has)
  char* copy = strdup(name);             // the caller's string may not outlive the look-up; kept for the process
  if (copy == nullptr) return function;
  __atomic_store_n(&slice_nvml_gate_targets[i], function, __ATOMIC_RELEASE);
  g_names[i].store(copy, std::memory_order_release);
  return gate(i);
}

}  // namespace slice::shim
