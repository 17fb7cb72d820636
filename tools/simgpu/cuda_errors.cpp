// cuGetErrorName/cuGetErrorString answers: every code of the installed cuda.h has its name; the
// common ones have the real driver's descriptions, the rest a description made from the name.
#include <cctype>
#include <map>
#include <string>

#include "driver.h"

namespace simgpu {

namespace {

struct ErrorText {
  std::map<int, const char*> names;
  std::map<int, std::string> strings;
};

const ErrorText& texts() {
  static const ErrorText t = [] {
    ErrorText e;
#define SIMGPU_ERROR(name, value) e.names[value] = #name;
#include "cuda_errors.inc"
#undef SIMGPU_ERROR
    static const std::pair<int, const char*> known[] = {
        {CUDA_SUCCESS, "no error"},
        {CUDA_ERROR_INVALID_VALUE, "invalid argument"},
        {CUDA_ERROR_OUT_OF_MEMORY, "out of memory"},
        {CUDA_ERROR_NOT_INITIALIZED, "initialization error"},
        {CUDA_ERROR_DEINITIALIZED, "driver shutting down"},
        {CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"},
        {CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"},
        {CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid"},
        {CUDA_ERROR_INVALID_CONTEXT, "invalid device context"},
        {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "context already current"},
        {CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"},
        {CUDA_ERROR_NOT_FOUND, "named symbol not found"},
        {CUDA_ERROR_NOT_READY, "device not ready"},
        {CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"},
        {CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"},
        {CUDA_ERROR_NO_BINARY_FOR_GPU, "no kernel image is available for execution on the device"},
        {CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"},
        {CUDA_ERROR_NOT_SUPPORTED, "operation not supported"},
        {CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"},
        {CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"},
        {CUDA_ERROR_ILLEGAL_STATE, "the operation is not permitted in the current state"},
        {CUDA_ERROR_FILE_NOT_FOUND, "file not found"},
        {CUDA_ERROR_ALREADY_MAPPED, "resource already mapped"},
        {CUDA_ERROR_NOT_MAPPED, "resource not mapped"},
        {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "peer access is already enabled"},
        {CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, "peer access has not been enabled"},
        {CUDA_ERROR_UNKNOWN, "unknown error"},
    };
    for (auto& [code, text] : known) e.strings[code] = text;
    for (auto& [code, name] : e.names) {
      if (e.strings.count(code)) continue;
      std::string s = name;
      const std::string prefix = "CUDA_ERROR_";
      if (s.rfind(prefix, 0) == 0) s = s.substr(prefix.size());
      for (char& c : s) c = c == '_' ? ' ' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      e.strings[code] = s;
    }
    return e;
  }();
  return t;
}

}  // namespace

const char* error_name(CUresult code) {
  auto it = texts().names.find(code);
  return it == texts().names.end() ? nullptr : it->second;
}

const char* error_string(CUresult code) {
  auto it = texts().strings.find(code);
  return it == texts().strings.end() ? nullptr : it->second.c_str();
}

}  // namespace simgpu
