// Fake GPUs for the coordinator tests: the worker program and the test suites must agree on the
// UUID and name of "GPU k" so that both meet the same device entry of a tenant file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "coordinator.h"

namespace slice::test {

constexpr std::uint64_t kFakeGpuBytes = 16ull << 30;  // 16 GiB unless a test says otherwise

inline Uuid fake_gpu_uuid(int k) {
  Uuid u{0x51, 0x1c, 0xe0, 0x7e, 0x57};  // "slice test"
  u[12] = static_cast<std::uint8_t>(k >> 24);
  u[13] = static_cast<std::uint8_t>(k >> 16);
  u[14] = static_cast<std::uint8_t>(k >> 8);
  u[15] = static_cast<std::uint8_t>(k);
  return u;
}

inline std::string fake_gpu_name(int k) { return "Fake GPU " + std::to_string(k); }

inline DeviceInfo fake_gpu(int k, std::optional<MemoryLimit> memory = std::nullopt,
                           std::uint64_t total_bytes = kFakeGpuBytes) {
  DeviceInfo d;
  d.uuid = fake_gpu_uuid(k);
  d.name = fake_gpu_name(k);
  d.total_bytes = total_bytes;
  d.memory = memory;
  return d;
}

}  // namespace slice::test
