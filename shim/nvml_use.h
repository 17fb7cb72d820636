// libslice's own NVML, for what it measures for itself (a context's memory, the reconciliation of
// what the driver holds for this process). NVML counts nvmlInit and nvmlShutdown: a reference taken
// in the application's copy of the library would change what the application sees (an unbalanced
// nvmlShutdown would succeed, and a query after its last shutdown would still answer), and an extra
// nvmlShutdown of the application's would take libslice's reference away. So libslice loads a copy
// of libnvidia-ml.so.1 of its own, in a link-map namespace of its own (dlmopen, LM_ID_NEWLM), whose
// count nothing of the application's touches. Where that cannot be loaded, libslice measures nothing
// through NVML (and says so once, at info), rather than share the application's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace slice::shim {

// This process's device memory on the GPU with this UUID ("GPU-..."), as NVML reports it (its entry
// in the running compute processes, 0 when not listed); nullopt where NVML cannot tell: no NVML, no
// private copy of it, or this process not to be found by its PID (a PID namespace NVML does not see).
std::optional<std::uint64_t> own_nvml_process_memory(const std::string& uuid);

}  // namespace slice::shim
