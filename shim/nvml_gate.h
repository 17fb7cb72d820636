// NVML's count as the program sees it while libslice holds a reference of its own (nvml_use.h): the
// program's inits less its shutdowns, and whether libslice holds one. NVML is "closed" to the
// program while libslice holds its reference and the program none: NVML would answer it, where
// without libslice it would answer NVML_ERROR_UNINITIALIZED.
//
// For the NVML functions libslice hooks, the hooks answer so themselves. For every other NVML
// function the program looks up by name (dlsym on NVML's handle: ctypes, pynvml, go-nvml, the CUDA
// runtime), the dlsym hook hands out a gate instead of the function: a few instructions that jump
// to the function while NVML is open to the program and answer NVML_ERROR_UNINITIALIZED while it is
// closed. The gates are fixed code in libslice (kNvmlGates of them, one per function, given out on
// first look-up); nvmlErrorString, which NVML answers at any count, gets none.
#pragma once

#include <cstddef>

namespace slice::shim {

inline constexpr std::size_t kNvmlGates = 512;  // NVML 13 exports about 400 functions

void nvml_view_own_reference() noexcept;     // libslice took its reference
void nvml_view_program_init() noexcept;      // one of the program's inits succeeded
bool nvml_view_program_shutdown() noexcept;  // one of its shutdowns: false when it holds no reference
bool nvml_view_closed() noexcept;

// What the program gets for NVML's `function` looked up by `name`: its gate, or the function itself
// (a function NVML answers at any count, or no gate left).
void* nvml_gate_for(const char* name, void* function) noexcept;

}  // namespace slice::shim
