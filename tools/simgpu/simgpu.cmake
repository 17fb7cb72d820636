# The simulated GPU: libcuda.so.1 and libnvidia-ml.so.1 in ${CMAKE_BINARY_DIR}/simgpu, and simgpu-stat.
# Programs run with that folder on LD_LIBRARY_PATH see simulated devices (ARCHITECTURE.md part A).
set(SIMGPU_LIB_DIR ${CMAKE_BINARY_DIR}/simgpu CACHE INTERNAL "folder of the simulated driver")

# The machine state and device identity, shared by the driver, NVML and simgpu-stat; and, for the
# driver and NVML, the reports of breaches and the per-thread state in pthread keys (thread_keys.h).
add_library(simgpu_common STATIC machine_state.cpp sim_identity.cpp thread_keys.cpp violations.cpp visible_devices.cpp)
target_include_directories(simgpu_common PUBLIC ${CMAKE_CURRENT_SOURCE_DIR} ${CUDA_DRIVER_INCLUDE_DIR})
target_link_libraries(simgpu_common PUBLIC Threads::Threads)

set(_errors_inc ${CMAKE_CURRENT_BINARY_DIR}/generated/cuda_errors.inc)
add_custom_command(
  OUTPUT ${_errors_inc}
  COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_CURRENT_BINARY_DIR}/generated
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/gen/cuda_errors.py
          --cuda-h ${CUDA_DRIVER_INCLUDE_DIR}/cuda.h --out ${_errors_inc}
  DEPENDS ${CMAKE_SOURCE_DIR}/tools/gen/cuda_errors.py ${CUDA_DRIVER_INCLUDE_DIR}/cuda.h
  COMMENT "Generating the CUresult names from cuda.h"
  VERBATIM)

add_library(simgpu_cuda SHARED
  cuda_errors.cpp device_arena.cpp device_runner.cpp drv_array.cpp drv_capture.cpp drv_context.cpp drv_copy.cpp drv_device.cpp
  drv_graph_memory.cpp drv_ipc.cpp drv_launch.cpp drv_managed.cpp drv_memory.cpp drv_module.cpp drv_pool.cpp drv_procaddr.cpp drv_stream.cpp
  drv_linker.cpp drv_thread.cpp drv_vmm.cpp executor.cpp export_stubs.cpp export_table.cpp load_time.cpp ${_errors_inc})
target_include_directories(simgpu_cuda PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/generated)
target_link_libraries(simgpu_cuda PRIVATE simgpu_common simgpu_image slice_procaddr Threads::Threads)
set_target_properties(simgpu_cuda PROPERTIES
  OUTPUT_NAME cuda SOVERSION 1
  LIBRARY_OUTPUT_DIRECTORY ${SIMGPU_LIB_DIR})
# Export only the driver API: our C++ internals stay out of the dynamic symbol table.
# -Bsymbolic-functions: like the real driver, the simulator's own calls and its cuGetProcAddress
# answers use its own functions even when a preloaded library (libslice) exports the same names;
# without it cuGetProcAddress would hand out the preloaded wrappers and hide a shim that forgets
# to substitute them.
# -z nodelete: the library's pthread keys name destructors in it (thread_keys.h), which a thread
# that exits after a dlclose would otherwise call in unmapped code; the keys stay, so the code stays.
target_link_options(simgpu_cuda PRIVATE -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/libcuda.map -Wl,--no-undefined
                    -Wl,-Bsymbolic-functions -Wl,-z,nodelete)
set_property(TARGET simgpu_cuda APPEND PROPERTY LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/libcuda.map)

add_library(simgpu_nvml SHARED load_time.cpp nvml.cpp nvml_start.cpp nvml_thread.cpp nvml_unmodelled.cpp)
target_link_libraries(simgpu_nvml PRIVATE simgpu_common Threads::Threads)
set_target_properties(simgpu_nvml PROPERTIES
  OUTPUT_NAME nvidia-ml SOVERSION 1
  CXX_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${SIMGPU_LIB_DIR})
target_link_options(simgpu_nvml PRIVATE -Wl,--version-script=${CMAKE_CURRENT_SOURCE_DIR}/libnvml.map -Wl,--no-undefined
                    -Wl,-Bsymbolic-functions -Wl,-z,nodelete)  # as above
set_property(TARGET simgpu_nvml APPEND PROPERTY LINK_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/libnvml.map)

add_executable(simgpu-stat simgpu_stat.cpp)
target_link_libraries(simgpu-stat PRIVATE simgpu_common)
set_target_properties(simgpu-stat PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)

# A sample client that keeps the device busy (tests, benchmarks and the demo use it).
add_executable(simgpu-load simgpu_load.cpp)
target_include_directories(simgpu-load PRIVATE ${CUDA_DRIVER_INCLUDE_DIR})
target_link_libraries(simgpu-load PRIVATE simgpu_cuda)
set_target_properties(simgpu-load PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin
  BUILD_RPATH ${SIMGPU_LIB_DIR})
