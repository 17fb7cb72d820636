# The rules the real driver enforces by punishing misuse (stream capture, destroyed handles) and the
# memory it holds beyond allocations, on the simulated driver alone. It breaks the rules on purpose
# and reads the simulator's reports itself.
slice_add_gtest(conformance_rules_test SOURCES conformance_rules_test.cpp LIBS simgpu_cuda simgpu_nvml LABELS sim)
target_include_directories(conformance_rules_test PRIVATE ${CUDA_DRIVER_INCLUDE_DIR} ${CMAKE_SOURCE_DIR}/tools/simgpu)
set_tests_properties(conformance_rules_test PROPERTIES ENVIRONMENT "SIMGPU_VIOLATIONS_EXPECTED=1")
