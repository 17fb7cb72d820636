// Found only through dlopen_caller's RUNPATH; its own dependency through its RPATH ($ORIGIN).
extern "C" int dlopen_dep_value();

extern "C" __attribute__((visibility("default"))) int dlopen_target_value() { return dlopen_dep_value() + 1; }
