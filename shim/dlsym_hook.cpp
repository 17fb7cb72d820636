// The dlsym hook. dlsym is exported by a few instructions of assembly that ask
// slice_dlsym_route what to do and then either return our wrapper or JUMP (not call) to glibc's
// dlsym with the caller's arguments and return address untouched. glibc decides what RTLD_NEXT
// means from that return address; an ordinary C wrapper would make libslice the caller, so another
// preloaded library's dlsym(RTLD_NEXT, ...) would resolve relative to libslice (finding itself
// and recursing, or nothing). See docs/ARCHITECTURE.md, "How calls reach libslice".
// The dlsym hook. dlsym is exported by a few instructions of assembly that ask
// slice_dlsym_route what to do and then either return our answer or JUMP (not call) to glibc's
// dlsym with the caller's arguments and return address untouched. glibc decides what RTLD_NEXT
// means from that return address; an ordinary C wrapper would make libslice the caller, so another
// preloaded library's dlsym(RTLD_NEXT, ...) would resolve relative to libslice (finding itself
// and recursing, or nothing). See docs/ARCHITECTURE.md, "How calls reach libslice".
//
// What a look-up of a hooked name gets:
// - RTLD_DEFAULT: glibc's answer, the first definition in the global scope: libslice's own (it is
//   preloaded), or one that the program or a library preloaded before libslice defines, as without
//   libslice (a program that exports a variable named cuInit gets its variable, as it would
//   anyway); for an NVML function libslice does not hook, found in NVML, its gate (below);
// - RTLD_NEXT from an object loaded before libslice: glibc's answer, the next definition after the
//   caller (another interposer, or libslice); from libslice or an object loaded after it (another
//   interposer, a plugin): libslice's own function, so that nobody reaches the driver around it;
// - a handle (of the driver, or of a library that depends on it): glibc's answer, and where that is
//   a function of the real driver or NVML, libslice's wrapper of it instead; for an NVML function
//   libslice does not hook, a gate in front of it (nvml_gate.h: NVML as the program would see it
//   without libslice's own reference).
// libslice's own function is always its own definition: the library is linked with
// -Bsymbolic-functions, so hook_info().wrapper is never a definition of the program's.
// Where libslice answers without glibc's look-up, glibc's error state is cleared by a look-up that
// succeeds, as glibc's dlsym does on success (dlerror() then says nothing).
#include <dlfcn.h>
#include <link.h>

#include <atomic>
#include <cstring>

#include "keep_errno.h"
#include "nvml_gate.h"
#include "shim.h"

namespace {

// The object an address lies in, by its link map; nullptr when none.
struct link_map* object_of(const void* address) noexcept {
  Dl_info info{};
  struct link_map* map = nullptr;
  if (dladdr1(address, &info, reinterpret_cast<void**>(&map), RTLD_DL_LINKMAP) == 0) return nullptr;
  return map;
}

// Is this object the driver or NVML (however the application named the file)?
bool is_driver_object(const struct link_map* map) noexcept {
  if (map == nullptr || map->l_name == nullptr) return false;
  const char* base = std::strrchr(map->l_name, '/');
  base = base != nullptr ? base + 1 : map->l_name;
  return std::strncmp(base, "libcuda.so", 10) == 0 || std::strncmp(base, "libnvidia-ml.so", 15) == 0;
}

// libslice's own link map, found once (no static guard: racing threads store the same value).
std::atomic<struct link_map*> g_self{nullptr};
struct link_map* libslice_object() noexcept {
  struct link_map* self = g_self.load(std::memory_order_acquire);
  if (self == nullptr) {
    self = object_of(reinterpret_cast<const void*>(&object_of));
    g_self.store(self, std::memory_order_release);
  }
  return self;
}

// Whether `caller` lies in an object loaded before libslice (the executable, a library preloaded
// before it): glibc's RTLD_NEXT from there finds libslice or an object between the two.
bool loaded_before_libslice(const void* caller) noexcept {
  const struct link_map* self = libslice_object();
  struct link_map* map = object_of(caller);
  if (map == nullptr || self == nullptr || map == self) return false;
  for (const struct link_map* m = map->l_next; m != nullptr; m = m->l_next)
    if (m == self) return true;
  return false;
}

}  // namespace

// Returned in two registers (rax:rdx on x86-64, x0:x1 on aarch64): jump_to non-null means "jump
// there with the original arguments", otherwise `answer` is dlsym's result.
struct DlsymRoute {
  void* jump_to;
  void* answer;
};

extern "C" __attribute__((visibility("hidden"), used)) DlsymRoute slice_dlsym_route(void* handle, const char* name,
                                                                                    const void* caller) noexcept {
  const slice::shim::DlsymFn real = slice::shim::real_dlsym();
  if (real == nullptr) return {nullptr, nullptr};
  const DlsymRoute glibc{reinterpret_cast<void*>(real), nullptr};
  // Fast path for every name that is not a CUDA or NVML one: two byte compares.
  if (name == nullptr || !((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v'))) return glibc;
  const slice::shim::HookInfo* hook = slice::shim::find_hook(name);
  const bool nvml = hook == nullptr && std::strncmp(name, "nvml", 4) == 0;
  if ((hook == nullptr && !nvml) || (handle == RTLD_DEFAULT && hook != nullptr) || slice::shim::disabled())
    return glibc;
  const slice::shim::KeepErrno keep;
  if (handle == RTLD_NEXT) {
    if (hook == nullptr || loaded_before_libslice(caller)) return glibc;
    // Answered here: glibc's error state as after a look-up that succeeded (libslice's own export).
    (void)real(libslice_object(), hook->name);
    return {nullptr, hook->wrapper};
  }
  // A handle, or RTLD_DEFAULT for an NVML function libslice does not hook: the caller's address does
  // not matter for the look-up (the global scope is the same from every object of the program's
  // namespace), so calling here is fine.
  void* found = real(handle, name);
  if (found == nullptr || !is_driver_object(object_of(found))) return {nullptr, found};
  // The driver's or NVML's function: libslice's wrapper, or for an NVML function libslice does not
  // hook, its gate (closed while NVML is started only for libslice: nvml_gate.h).
  return {nullptr, hook != nullptr ? hook->wrapper : slice::shim::nvml_gate_for(name, found)};
}

#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
  movq (%rsp), %rdx
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  pushq %rsi
  .cfi_adjust_cfa_offset 8
  subq $8, %rsp
  .cfi_adjust_cfa_offset 8
  call slice_dlsym_route
  addq $8, %rsp
  .cfi_adjust_cfa_offset -8
  popq %rsi
  .cfi_adjust_cfa_offset -8
  popq %rdi
  .cfi_adjust_cfa_offset -8
  testq %rax, %rax
  jz 1f
  jmp *%rax
1:
  movq %rdx, %rax
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#elif defined(__aarch64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, %function
  .p2align 4
dlsym:
  .cfi_startproc
  stp x29, x30, [sp, #-32]!
  .cfi_def_cfa_offset 32
  .cfi_offset 29, -32
  .cfi_offset 30, -24
  mov x29, sp
  stp x0, x1, [sp, #16]
  mov x2, x30
  bl slice_dlsym_route
  mov x16, x0
  cbz x16, 1f
  ldp x0, x1, [sp, #16]
  ldp x29, x30, [sp], #32
  .cfi_remember_state
  .cfi_def_cfa_offset 0
  .cfi_restore 29
  .cfi_restore 30
  br x16
1:
  .cfi_restore_state
  mov x0, x1
  ldp x29, x30, [sp], #32
  .cfi_def_cfa_offset 0
  .cfi_restore 29
  .cfi_restore 30
  ret
  .cfi_endproc
  .size dlsym, .-dlsym
)");
#else
#error "libslice's dlsym hook needs a tail-jump trampoline for this architecture"
#endif
