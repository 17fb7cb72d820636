// What the simulated devices are: name, UUID, PCI bus id and attributes. Shared by the driver, NVML
// and simgpu-stat so that every view of a device agrees.
#pragma once

#include <string>

namespace simgpu {

constexpr const char* kDeviceName = "NVIDIA SimGPU";

// 16 stable bytes per device index (the same on every run and every machine).
void device_uuid_bytes(int device, unsigned char out[16]);
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it.
std::string device_uuid_string(int device);
int device_by_uuid_string(const std::string& uuid, int device_count);  // -1 when unknown
// "00000000:17:00.0"
std::string device_pci_bus_id(int device);
unsigned device_pci_bus(int device);
int device_by_pci_bus_id(const std::string& bus_id, int device_count);  // -1 when unknown
// CUdevice_attribute values of the simulated card (an Ada-generation GeForce-like device).
int device_attribute(int attribute, int device);

}  // namespace simgpu
