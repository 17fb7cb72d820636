# Conformance of the simulated driver's CUDA IPC and graph memory nodes (a second GoogleTest program,
# linked like conformance_test; it forks sibling processes on the same simulated machine and reads
# simgpu-stat).
slice_add_gtest(conformance_ipc_graph_memory_test SOURCES conformance_ipc_graph_memory_test.cpp
                LIBS simgpu_cuda simgpu_nvml ${CMAKE_DL_LIBS} LABELS sim)
target_include_directories(conformance_ipc_graph_memory_test PRIVATE ${CUDA_DRIVER_INCLUDE_DIR}
                           ${CMAKE_SOURCE_DIR}/tools/simgpu)
add_dependencies(conformance_ipc_graph_memory_test simgpu-stat)
