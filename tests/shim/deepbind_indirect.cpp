// A plugin that does not need the driver itself but through a library it needs (libshim_deepbind_user,
// linked against libcuda): opened with RTLD_DEEPBIND, that library's references to the driver would
// bind to it around libslice, so libslice clears the flag (issue 25).
extern "C" void* deepbind_cuMemAlloc_v2_address();
extern "C" __attribute__((visibility("default"))) void* deepbind_indirect_address() {
  return deepbind_cuMemAlloc_v2_address();
}
