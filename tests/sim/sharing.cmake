# Multi-process sharing tests: real processes (spin_worker) on one simulated machine.
add_executable(spin_worker spin_worker.cpp)
target_include_directories(spin_worker PRIVATE ${CUDA_DRIVER_INCLUDE_DIR})
target_link_libraries(spin_worker PRIVATE simgpu_cuda)
slice_add_gtest(sharing_test SOURCES sharing_test.cpp LIBS simgpu_common LABELS sim)
target_compile_definitions(sharing_test PRIVATE SPIN_WORKER="$<TARGET_FILE:spin_worker>")
add_dependencies(sharing_test spin_worker)
