// The dlsym hook. dlsym is exported by a few instructions of assembly that ask
// slice_dlsym_route what to do and then either return our wrapper or JUMP (not call) to glibc's
// dlsym with the caller's arguments and return address untouched. glibc decides what RTLD_NEXT
// means from that return address; an ordinary C wrapper would make libslice the caller, so another
// preloaded library's dlsym(RTLD_NEXT, ...) would resolve relative to libslice (finding itself
// and recursing, or nothing). See docs/ARCHITECTURE.md, "How calls reach libslice".
#include <dlfcn.h>
#include <link.h>

#include <cstring>

#include "shim.h"

namespace {

// Is this a handle of the driver or NVML (however the application named the file)?
bool is_driver_handle(void* handle) noexcept {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) return false;
  const char* base = std::strrchr(map->l_name, '/');
  base = base != nullptr ? base + 1 : map->l_name;
  return std::strncmp(base, "libcuda.so", 10) == 0 || std::strncmp(base, "libnvidia-ml.so", 15) == 0;
}

}  // namespace

// Returned in two registers (rax:rdx on x86-64, x0:x1 on aarch64): jump_to non-null means "jump
// there with the original arguments", otherwise `answer` is dlsym's result.
struct DlsymRoute {
  void* jump_to;
  void* answer;
};

extern "C" __attribute__((visibility("hidden"), used)) DlsymRoute slice_dlsym_route(void* handle,
                                                                                    const char* name) noexcept {
  const slice::shim::DlsymFn real = slice::shim::real_dlsym();
  if (real == nullptr) return {nullptr, nullptr};
  // Fast path for every name that is not a CUDA or NVML one: two byte compares.
  if (name == nullptr || !((name[0] == 'c' && name[1] == 'u') || (name[0] == 'n' && name[1] == 'v'))) {
    return {reinterpret_cast<void*>(real), nullptr};
  }
  const slice::shim::HookInfo* hook = slice::shim::find_hook(name);
  if (hook == nullptr || slice::shim::disabled()) return {reinterpret_cast<void*>(real), nullptr};
  if (handle == RTLD_DEFAULT || handle == RTLD_NEXT) return {nullptr, hook->wrapper};
  if (!is_driver_handle(handle)) return {reinterpret_cast<void*>(real), nullptr};
  // A driver handle: answer with our wrapper only where the driver has the export. The caller's
  // address does not matter for a lookup in a named handle, so calling here is fine.
  return {nullptr, real(handle, name) != nullptr ? hook->wrapper : nullptr};
}

#if defined(__x86_64__)
asm(R"(
  .text
  .globl dlsym
  .type dlsym, @function
  .p2align 4
dlsym:
  .cfi_startproc
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
