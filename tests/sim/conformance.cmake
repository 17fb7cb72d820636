# Conformance of the simulated driver with the real one (ARCHITECTURE.md part A): one GoogleTest
# program linked directly against the simulated libcuda.so.1 and libnvidia-ml.so.1.
slice_add_gtest(conformance_test SOURCES conformance_test.cpp LIBS simgpu_cuda simgpu_nvml ${CMAKE_DL_LIBS} LABELS sim)
# cuda.h, and the NVML types the simulator declares (nvml_subset.h); the functions are declared in the test.
target_include_directories(conformance_test PRIVATE ${CUDA_DRIVER_INCLUDE_DIR} ${CMAKE_SOURCE_DIR}/tools/simgpu)
if(TARGET simgpu_test_kernels)
  add_dependencies(conformance_test simgpu_test_kernels)
  target_compile_definitions(conformance_test PRIVATE SIMGPU_TEST_KERNEL_DIR="${SIMGPU_TEST_KERNEL_DIR}")
endif()
# It uses destroyed handles on purpose (the driver's answers to them are part of the contract).
set_tests_properties(conformance_test PROPERTIES ENVIRONMENT "SIMGPU_VIOLATIONS_EXPECTED=1")
