// Every export of the real libcuda that the simulator does not implement answers
// CUDA_ERROR_NOT_SUPPORTED (801) instead of being missing: a program linked against the real driver
// loads, and an unimplemented call fails cleanly. Real implementations elsewhere override these weak
// definitions. Whatever its arguments, a function that ignores them and returns an int is safe to
// call under the x86-64 and AArch64 calling conventions. No cuda.h here: its declarations would clash.
#define SLICE_DRIVER_EXPORT(sym) \
  extern "C" __attribute__((weak, visibility("default"))) int sym() { return 801; }
#include "driver_exports.inc"
#undef SLICE_DRIVER_EXPORT
