// A stand-in for a program under libslice, for slicectl's tests: joins the coordinator as one
// process of a tenant, on fake GPUs (no CUDA), reserves memory, prints "ready" and then answers
// commands on standard input until it closes:
//   reserve D BYTES  -> "ok" or "refused USAGE CAP"      (D: index of --device)
//   release D BYTES  -> "ok"
//   cap D            -> the tenant's cap on D in bytes, or "none"
//   publish D        -> "SHARE LIMIT PRIORITY": the tenant's effective compute settings
//                       on D (Coordinator::compute(D)), also published in its file's entry for D as
//                       libslice's compute watcher publishes them for the other tenants' schedulers
//
// usage: slicectl_tenant_holder --tenant NAME --device HH:NAME:TOTAL [--device ...]
//          [--memory Q] [--compute P] [--compute-gpu D:P ...] [--limit P] [--priority P]
//          [--reserve D:BYTES ...] [--comm NAME]
// A device's UUID is the byte HH (hex) repeated: 11 -> GPU-11111111-1111-1111-1111-111111111111.
// The coordinator is $SLICE_COORDINATOR_DIR.
#include <sys/prctl.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "coordinator.h"

namespace {

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "slicectl_tenant_holder: %s\n", why.c_str());
  std::exit(2);
}

slice::DeviceInfo device_of(const std::string& spec) {
  const auto a = spec.find(':'), b = spec.rfind(':');
  if (a == std::string::npos || a == b) die("--device wants HH:NAME:TOTAL, got " + spec);
  slice::DeviceInfo d;
  d.uuid.fill(static_cast<std::uint8_t>(std::stoul(spec.substr(0, a), nullptr, 16)));
  d.name = spec.substr(a + 1, b - a - 1);
  d.total_bytes = std::stoull(spec.substr(b + 1));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  slice::JoinRequest r;
  const char* dir = std::getenv("SLICE_COORDINATOR_DIR");
  if (!dir) die("SLICE_COORDINATOR_DIR is not set");
  r.dir = dir;
  if (const char* policies = std::getenv("SLICE_POLICY_DIR")) r.policy_dir = policies;
  std::optional<slice::MemoryLimit> memory;
  std::vector<std::pair<int, std::uint64_t>> reserves;
  std::vector<std::pair<int, std::uint32_t>> compute_gpu;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string opt = argv[i], value = argv[i + 1];
    if (opt == "--tenant")
      r.tenant = value;
    else if (opt == "--device")
      r.devices.push_back(device_of(value));
    else if (opt == "--memory")
      memory = slice::parse_memory_limit(value).value;
    else if (opt == "--compute")
      r.compute_share = std::stoul(value);
    else if (opt == "--limit")
      r.compute_limit = std::stoul(value);
    else if (opt == "--compute-gpu")
      compute_gpu.emplace_back(std::stoi(value), std::stoul(value.substr(value.find(':') + 1)));
    else if (opt == "--priority")
      r.priority = slice::parse_priority(value).value.value_or(slice::Priority::normal);
    else if (opt == "--reserve")
      reserves.emplace_back(std::stoi(value), std::stoull(value.substr(value.find(':') + 1)));
    else if (opt == "--comm")
      prctl(PR_SET_NAME, value.c_str(), 0, 0, 0);
    else
      die("unknown option " + opt);
  }
  for (auto& d : r.devices) d.memory = memory;
  for (auto [d, share] : compute_gpu)
    if (d >= 0 && d < static_cast<int>(r.devices.size())) r.devices[d].compute_share = share;
  std::string error;
  std::vector<std::string> warnings;
  auto c = slice::Coordinator::join(r, error, warnings);
  if (!c) die("join: " + error);
  for (auto [d, bytes] : reserves)
    if (!c->reserve(d, bytes)) die("could not reserve " + std::to_string(bytes) + " on device " + std::to_string(d));
  std::cout << "ready" << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string cmd;
    int d = 0;
    std::uint64_t bytes = 0;
    in >> cmd >> d >> bytes;
    if (d < 0 || d >= static_cast<int>(r.devices.size())) {
      std::cout << "bad device" << std::endl;
    } else if (cmd == "reserve") {
      slice::Refusal why;
      if (c->reserve(d, bytes, &why))
        std::cout << "ok" << std::endl;
      else
        std::cout << "refused " << why.usage << " " << why.cap << std::endl;
    } else if (cmd == "release") {
      c->release(d, bytes);
      std::cout << "ok" << std::endl;
    } else if (cmd == "cap") {
      const std::uint64_t cap = c->cap(d);
      if (cap == slice::kNoLimit)
        std::cout << "none" << std::endl;
      else
        std::cout << cap << std::endl;
    } else if (cmd == "publish") {
      const slice::Coordinator::ComputeSettings settings = c->compute(d);
      slice::DeviceEntry& entry = c->device_entry(d);
      entry.compute_share.store(settings.share);
      entry.compute_limit.store(settings.limit);
      entry.compute_priority.store(slice::stored_priority(settings.priority));
      std::cout << settings.share << " " << settings.limit << " " << slice::to_string(settings.priority) << std::endl;
    } else {
      std::cout << "unknown command" << std::endl;
    }
  }
  return 0;
}
