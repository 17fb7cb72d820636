// simgpu-stat: the ground truth of the simulated machine. Per device the memory in use, and per
// process its memory, its kernel count and the nanoseconds of device time it received.
#include <cstdio>
#include <cstring>
#include <string>

#include "machine_state.h"
#include "sim_identity.h"

namespace {

void usage(FILE* out) {
  std::fprintf(out,
               "usage: simgpu-stat [--json]\n"
               "Prints what the simulated GPU (SIMGPU_STATE, default /dev/shm/simgpu) really did:\n"
               "per device the memory in use, and per live process its memory, kernels and device time.\n"
               "  --json   one JSON object: {\"devices\":[{\"index\",\"uuid\",\"total_bytes\",\"used_bytes\",\n"
               "           "
               "\"busy_ns\",\"processes\":[{\"pid\",\"name\",\"memory_bytes\",\"kernels\",\"busy_ns\",\"host_"
               "functions\"}]}]}\n");
}

std::string json_escape(const char* s) {
  std::string out;
  for (; *s; ++s) {
    unsigned char c = static_cast<unsigned char>(*s);
    if (c == '"' || c == '\\')
      out += '\\', out += static_cast<char>(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else
      out += static_cast<char>(c);
  }
  return out;
}

double mib(std::uint64_t b) { return static_cast<double>(b) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json"))
      json = true;
    else if (!std::strcmp(argv[i], "--help") || !std::strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      std::fprintf(stderr, "simgpu-stat: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  simgpu::MachineConfig config;
  std::string error;
  simgpu::Machine* m = nullptr;
  if (!simgpu::read_machine_config(config, error) || !(m = simgpu::Machine::attach(config, error))) {
    std::fprintf(stderr, "simgpu-stat: %s\n", error.c_str());
    return 1;
  }
  m->reap_dead_slots();  // the dead hold nothing, as on a real driver
  simgpu::MachineState& st = m->state();
  if (json) std::printf("{\"devices\":[");
  for (int d = 0; d < m->device_count(); ++d) {
    std::uint64_t free_b = 0, total = 0;
    m->memory_info(d, free_b, total);
    const std::uint64_t used = total - free_b;
    const std::string uuid = simgpu::device_uuid_string(d);
    if (json) {
      std::printf(
          "%s{\"index\":%d,\"uuid\":\"%s\",\"name\":\"%s\",\"total_bytes\":%llu,\"used_bytes\":%llu,"
          "\"busy_ns\":%llu,\"kernels\":%llu,\"processes\":[",
          d ? "," : "", d, uuid.c_str(), simgpu::kDeviceName, static_cast<unsigned long long>(total),
          static_cast<unsigned long long>(used), static_cast<unsigned long long>(st.devices[d].busy_ns.load()),
          static_cast<unsigned long long>(st.devices[d].kernels.load()));
    } else {
      std::printf("device %d  %s  %s  memory %.1f / %.1f MiB  busy %.3f s  kernels %llu\n", d, uuid.c_str(),
                  simgpu::kDeviceName, mib(used), mib(total), st.devices[d].busy_ns.load() / 1e9,
                  static_cast<unsigned long long>(st.devices[d].kernels.load()));
      std::printf("  %8s  %-16s %14s %12s %14s\n", "PID", "NAME", "MEMORY (MiB)", "KERNELS", "BUSY (s)");
    }
    bool first = true;
    for (auto& slot : st.slots) {
      const int pid = slot.pid.load();
      if (pid == 0) continue;
      const auto& s = slot.dev[d];
      char name[sizeof slot.name + 1] = {};
      std::memcpy(name, slot.name, sizeof slot.name);
      if (json) {
        std::printf(
            "%s{\"pid\":%d,\"name\":\"%s\",\"memory_bytes\":%llu,\"kernels\":%llu,\"busy_ns\":%llu,"
            "\"host_functions\":%llu}",
            first ? "" : ",", pid, json_escape(name).c_str(), static_cast<unsigned long long>(s.memory_bytes.load()),
            static_cast<unsigned long long>(s.kernels.load()), static_cast<unsigned long long>(s.busy_ns.load()),
            static_cast<unsigned long long>(s.host_functions.load()));
      } else {
        std::printf("  %8d  %-16s %14.1f %12llu %14.3f\n", pid, name, mib(s.memory_bytes.load()),
                    static_cast<unsigned long long>(s.kernels.load()), s.busy_ns.load() / 1e9);
      }
      first = false;
    }
    if (json) std::printf("]}");
  }
  if (json) std::printf("]}\n");
  return 0;
}
