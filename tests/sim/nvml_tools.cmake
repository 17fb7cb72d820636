# Monitoring tools from PyPI (nvitop, nvidia-ml-py) on the simulated NVML: no FunctionNotFound
# traceback, and N/A for what the simulator does not model (nvml_tools_test.py). Needs the venv
# of scripts/setup.sh --python (SLICE_TEST_PYTHON, set in tests/CMakeLists.txt).
if(SLICE_TEST_PYTHON)
  add_test(NAME conformance_nvml_tools
           COMMAND ${SLICE_TEST_WRAPPER} ${SLICE_TEST_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/nvml_tools_test.py)
  set_tests_properties(conformance_nvml_tools PROPERTIES TIMEOUT 300 LABELS sim ENVIRONMENT
    "LD_LIBRARY_PATH=${SIMGPU_LIB_DIR};SIMGPU_LOAD=$<TARGET_FILE:simgpu-load>;PYTHONDONTWRITEBYTECODE=1")
endif()
