// An empty shared library that stands in for libslice.so in slice-run's tests.
extern "C" int slice_run_test_preload_marker() { return 1; }
