# Multi-process sharing tests: real processes (simgpu-load) on one simulated machine.
slice_add_gtest(sharing_test SOURCES sharing_test.cpp LIBS simgpu_common LABELS sim)
target_compile_definitions(sharing_test PRIVATE SPIN_WORKER="$<TARGET_FILE:simgpu-load>")
add_dependencies(sharing_test simgpu-load)
