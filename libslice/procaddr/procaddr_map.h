// cuGetProcAddress look-up: which exported driver symbol answers (name, cudaVersion, flags).
//
// One name means different ABIs at different CUDA versions (cuCtxCreate at 3020 is cuCtxCreate_v2,
// at 12050 cuCtxCreate_v4), and the per-thread-default-stream flag selects the _ptsz/_ptds twins.
// A shim must hand back its wrapper of exactly the symbol the real driver would, so the table is
// generated from cudaTypedefs.h by tools/gen/procaddr_table.py (the rule is documented there).
// Plain C++: no CUDA headers, no allocation, safe to call during library start-up.
#pragma once

#include <span>
#include <string_view>

namespace slice {

struct ProcAddrEntry {
  const char* name;         // the name callers ask for, e.g. "cuMemAlloc"
  int version;              // first cudaVersion this ABI answers, e.g. 3020
  bool per_thread;          // a _ptsz/_ptds twin, handed out for CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
  const char* export_name;  // the driver export, e.g. "cuMemAlloc_v2"
};

// The generated table, sorted by name (byte order), then version, then per_thread.
std::span<const ProcAddrEntry> procaddr_entries();

enum class ProcAddrStatus { found, version_not_sufficient, symbol_not_found };

struct ProcAddrResolution {
  ProcAddrStatus status;
  const char* export_name;  // nullptr unless found
};

// Mirrors the driver's cuGetProcAddress: the newest ABI of `name` whose version is <= cuda_version.
// flags: bit 1 (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) alone asks for the per-thread twin,
// falling back to the default symbol where that ABI has none; 0, bit 0 (LEGACY_STREAM) and both
// bits together give the default symbol; higher bits are ignored.
ProcAddrResolution resolve_procaddr(std::string_view name, int cuda_version, unsigned long long flags);

}  // namespace slice
