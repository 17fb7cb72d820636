// The helpers that the generated wrappers of SLICE_HOOK_CU_AROUND and SLICE_HOOK_NVML_AROUND
// entries (hooked_functions.inc) call around the driver: what libslice does for a kind of call, once
// for every export of that kind. Each is defined beside the hooks of its kind; gated_launch, on every
// launch's path, is a template (launch_gate.h) so that the launch's own call is inlined into it.
#pragma once

#include "hook_support.h"
#include "launch_gate.h"
#include "nvml_api.h"

namespace slice::shim {

// Synchronisations (pool_hooks.cpp): a free before it may have let pools give memory back.
CUresult synchronize(RealCall call);

// Contexts (context_hooks.cpp): creation charges the context's own memory on its device; a
// destroyed, released or reset context is forgotten with what was allocated in it; a change of the
// calling thread's current context is passed through and forgotten by the launch path.
CUresult create_context(CUcontext* pctx, CUdevice dev, RealCall call);
CUresult destroy_context(CUcontext ctx, RealCall call);
CUresult release_primary_context(CUdevice dev, RealCall call);
CUresult switch_context(RealCall call);

// Streams (stream_hooks.cpp, capture_hooks.cpp): a destroyed stream is forgotten first; captures
// are counted from before they begin until their origin no longer captures. `ptsz`: the _ptsz
// export, whose stream 0 is the calling thread's per-thread stream.
CUresult destroy_stream(CUstream stream, RealCall call);
CUresult begin_capture(CUstream stream, bool ptsz, RealCall call);
CUresult end_capture(CUstream stream, bool ptsz, RealCall call);

// Graph launches (graph_memory_hooks.cpp): gated like a kernel, and the graph's memory mapped.
CUresult graph_launch(CUgraphExec exec, CUstream stream, bool ptsz, RealCall call);

// NVML (nvml_hooks.cpp): the slice's memory figures, and only this tenant's processes.
nvmlReturn_t memory_info(nvmlDevice_t device, nvmlMemory_t* memory, decltype(&::nvmlDeviceGetMemoryInfo) real);
nvmlReturn_t memory_info(nvmlDevice_t device, nvmlMemory_v2_t* memory, decltype(&::nvmlDeviceGetMemoryInfo_v2) real);
nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos,
                               decltype(&::nvmlDeviceGetComputeRunningProcesses_v3) real);
nvmlReturn_t running_processes(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos,
                               decltype(&::nvmlDeviceGetComputeRunningProcesses) real);

}  // namespace slice::shim
