// The plugin's life: serve the DevicePlugin service on its socket, register with the kubelet,
// register again whenever the kubelet restarts (it recreates kubelet.sock and wipes the plugins'
// sockets), keep asking NVML about the GPUs' health, and on SIGTERM or SIGINT stop and remove the
// socket.
#pragma once

#include "nvml_library.h"
#include "plugin_options.h"
#include "slice_inventory.h"

namespace slice::k8s {

// Runs until SIGTERM or SIGINT; the process's exit status.
int run_plugin(const PluginOptions& options, const Inventory& inventory, NvmlLibrary& nvml);

}  // namespace slice::k8s
