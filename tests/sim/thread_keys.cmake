# The simulated driver's and NVML's per-thread state in pthread keys (tools/simgpu/thread_keys.h):
# made when each library is loaded, checked on every call, a key that another C library overwrote
# reported. Linked with the simulated libcuda.so.1 alone, so that its keys are the process's first;
# NVML is dlopen'ed from the simulator's folder, into this namespace or a new one. It breaks the rule
# on purpose and reads the simulator's reports itself.
slice_add_gtest(thread_keys_test SOURCES thread_keys_test.cpp LIBS simgpu_cuda ${CMAKE_DL_LIBS} LABELS sim)
target_include_directories(thread_keys_test PRIVATE ${CUDA_DRIVER_INCLUDE_DIR} ${CMAKE_SOURCE_DIR}/tools/simgpu)
target_compile_definitions(thread_keys_test PRIVATE SIMGPU_LIB_DIR="${SIMGPU_LIB_DIR}")
add_dependencies(thread_keys_test simgpu_nvml)
set_tests_properties(thread_keys_test PROPERTIES ENVIRONMENT "SIMGPU_VIOLATIONS_EXPECTED=1")
