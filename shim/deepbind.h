// RTLD_DEEPBIND: a library opened with it looks symbols up in its own scope (itself and what it
// needs) before the global one, so if that scope holds the real driver or NVML, its references to
// the driver's functions bind there, around libslice's hooks. Plugins that bundle their own copies
// of common libraries (LLVM, protobuf) rely on the flag to keep those copies apart, so libslice
// clears it only where it would let the library escape (issue 25): the library, or a library it
// needs (followed as the loader would find it: a path given, the caller's and each library's
// RUNPATH or RPATH with $ORIGIN, LD_LIBRARY_PATH, the C library's folders and the default ones, or
// an object already loaded under that name), needs libcuda.so* or libnvidia-ml.so*. A dependency that
// only the loader's cache (/etc/ld.so.cache) can find is not followed.
#pragma once

namespace slice::shim {

// Whether dlopen(file, ... | RTLD_DEEPBIND) from code at `caller` would bind the driver or NVML
// before libslice. Reads the files' dynamic sections; errno as it was.
bool deepbind_reaches_driver(const char* file, const void* caller) noexcept;

}  // namespace slice::shim
