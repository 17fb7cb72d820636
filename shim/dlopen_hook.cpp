// The dlopen hook: RTLD_DEEPBIND must not let a library linked with -lcuda escape libslice. With
// DEEPBIND a library's own dependencies (the real libcuda) come before the global scope, so the
// preloaded hooks lose every symbol it binds. dlopen is exported by a few instructions of assembly
// that clear that one flag (the second argument) where it would let the library escape
// (deepbind.h: only then; plugins that bundle their own LLVM or protobuf rely on it) and JUMP to
// glibc's dlopen with the caller's return address untouched: glibc finds the caller from it, and the
// caller decides the namespace, the RPATH/RUNPATH searched and what $ORIGIN in the file name means.
// An ordinary C wrapper would make libslice the caller of every dlopen in the process. See
// docs/ARCHITECTURE.md, "How calls reach libslice".
//
// Nothing else changes: this runs for every dlopen of the process, CUDA or not; a dlopen without
// DEEPBIND costs a test of one bit. A flag cleared is logged at debug level.
//
// dlmopen is left alone, on purpose. In a new namespace (LM_ID_NEWLM) nothing is preloaded
// (checked on glibc 2.36: a dlmopen'ed library binds to its own dependencies, flag or not), so
// libslice is not there to win and clearing a flag would change nothing; catching such a library
// would take a hook of a different kind. dlmopen(LM_ID_BASE, ..., RTLD_DEEPBIND) is the same
// escape as dlopen's, but nothing we know of does it, and it is not worth one more libc function
// interposed in every process.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "deepbind.h"
#include "log.h"
#include "shim.h"

namespace {

using DlopenFn = void* (*)(const char*, int);
std::atomic<DlopenFn> g_real_dlopen{nullptr};

// glibc's dlopen, never ours. dlvsym is not hooked, and RTLD_NEXT here is relative to libslice.
// Racing threads store the same value.
DlopenFn real_dlopen() noexcept {
  DlopenFn fn = g_real_dlopen.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  void* sym = dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.34");  // glibc >= 2.34: in libc itself
#if defined(__x86_64__)
  if (sym == nullptr) sym = dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.2.5");  // older: libdl's
#elif defined(__aarch64__)
  if (sym == nullptr) sym = dlvsym(RTLD_NEXT, "dlopen", "GLIBC_2.17");  // aarch64's first version
#endif
  fn = reinterpret_cast<DlopenFn>(sym);
  g_real_dlopen.store(fn, std::memory_order_release);
  return fn;
}

}  // namespace

// Returned in two registers (rax:rdx on x86-64, x0:x1 on aarch64): where to jump (nullptr: glibc's
// dlopen was not found, dlopen returns NULL) and the flags to jump with.
struct DlopenRoute {
  void* jump_to;
  std::intptr_t mode;
};

extern "C" __attribute__((visibility("hidden"), used)) DlopenRoute slice_dlopen_route(int mode, const char* file,
                                                                                      const void* caller) noexcept {
  // disabled() only for a DEEPBIND open: other dlopens do not read the configuration.
  if ((mode & RTLD_DEEPBIND) != 0 && !slice::shim::disabled() && slice::shim::deepbind_reaches_driver(file, caller)) {
    mode &= ~RTLD_DEEPBIND;
    if (slice::log::enabled(slice::LogLevel::debug))
      slice::log::debug(std::string("dlopen(") + file + "): RTLD_DEEPBIND cleared, the library needs the driver");
  }
  return {reinterpret_cast<void*>(real_dlopen()), mode};
}

#if defined(__x86_64__)
// The file name (rdi) is kept on the stack across the call, which also aligns rsp for it. The route
// gets the mode, the file name and the caller's return address.
asm(R"(
  .text
  .globl dlopen
  .type dlopen, @function
  .p2align 4
dlopen:
  .cfi_startproc
  pushq %rdi
  .cfi_adjust_cfa_offset 8
  movq 8(%rsp), %rdx
  movl %esi, %eax
  movq %rdi, %rsi
  movl %eax, %edi
  call slice_dlopen_route
  popq %rdi
  .cfi_adjust_cfa_offset -8
  movl %edx, %esi
  testq %rax, %rax
  jz 1f
  jmp *%rax
1:
  ret
  .cfi_endproc
  .size dlopen, .-dlopen
)");
#elif defined(__aarch64__)
// x16 for the jump: a BTI "c" landing pad at glibc's dlopen accepts br only through x16/x17.
asm(R"(
  .text
  .globl dlopen
  .type dlopen, %function
  .p2align 4
dlopen:
  .cfi_startproc
  stp x29, x30, [sp, #-32]!
  .cfi_def_cfa_offset 32
  .cfi_offset 29, -32
  .cfi_offset 30, -24
  mov x29, sp
  str x0, [sp, #16]
  mov x2, x30
  mov x3, x0
  mov w0, w1
  mov x1, x3
  bl slice_dlopen_route
  mov x16, x0
  ldr x0, [sp, #16]
  ldp x29, x30, [sp], #32
  .cfi_def_cfa_offset 0
  .cfi_restore 29
  .cfi_restore 30
  cbz x16, 1f
  br x16
1:
  mov x0, #0
  ret
  .cfi_endproc
  .size dlopen, .-dlopen
)");
#else
#error "libslice's dlopen hook needs a tail-jump trampoline for this architecture"
#endif
