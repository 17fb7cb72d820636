// dlopen_target's dependency, next to it, found through the target's RPATH ($ORIGIN).
extern "C" __attribute__((visibility("default"))) int dlopen_dep_value() { return 41; }
