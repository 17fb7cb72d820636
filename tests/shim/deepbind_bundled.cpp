// A plugin that bundles its own copy of a function the program also exports (as plugins that carry
// their own LLVM or protobuf do), opened with RTLD_DEEPBIND so that it keeps to its own copy. It does
// not need the driver: libslice must leave its flag alone (issue 25).
extern "C" __attribute__((visibility("default"))) int deepbind_own_symbol() { return 1; }
// Called through the PLT (default visibility, -fPIC): bound in the plugin's scope first only with
// RTLD_DEEPBIND, else to the program's copy.
extern "C" __attribute__((visibility("default"))) int deepbind_bundled_answer() { return deepbind_own_symbol(); }
