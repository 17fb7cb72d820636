// slicectl status --json: the contract's keys (docs/ARCHITECTURE.md, "The contract"), and a few more.
// Strings may hold any bytes (a tenant writes the text fields of its own file): nlohmann::json
// escapes quotes, backslashes and control bytes, and turns each byte that is not valid UTF-8 into
// U+FFFD, so the output always parses and stays on one line.
#include <cstdio>
#include <optional>

#include <nlohmann/json.hpp>

#include "limits_text.h"
#include "status_model.h"

namespace slicectl {

namespace {

using Json = nlohmann::ordered_json;  // keys in the order written, as the contract lists them

template <typename T>
Json or_null(const std::optional<T>& value) {
  return value ? Json(*value) : Json(nullptr);
}

// Of memory_used_bytes, what the driver holds beyond the charged calls: null until measured, and
// where NVML cannot see the processes; memory_overhead says which.
void add_overhead(Json& j, slice::Reconciled r, std::uint64_t bytes) {
  j["memory_overhead_bytes"] = r == slice::Reconciled::measured ? Json(bytes) : Json(nullptr);
  j["memory_overhead"] = r == slice::Reconciled::measured       ? "measured"
                         : r == slice::Reconciled::unmeasurable ? "not measurable"
                                                                : "not measured yet";
}

Json tenant_json(const TenantOnDevice& on) {
  const slice::TenantView& t = *on.tenant;
  const slice::TenantGpuView& u = on.usage();
  Json j;
  j["name"] = t.name;
  j["priority"] = slice::to_string(t.priority);
  j["memory_limit_bytes"] = u.cap_bytes == slice::kNoLimit ? Json(nullptr) : Json(u.cap_bytes);
  j["memory_used_bytes"] = u.used_bytes;
  add_overhead(j, u.reconciled, u.overhead_bytes);
  j["compute_share"] = u.compute_share;  // on this GPU
  j["compute_limit"] = t.compute_limit;
  // Fractions 0..1; null while the tenant has no history on the GPU.
  j["compute_used_1s"] = or_null(u.compute_used_1s);
  j["compute_used_10s"] = or_null(u.compute_used_10s);
  // Metering (cumulative on this GPU since the tenant's record began; see slicectl usage).
  j["device_seconds_total"] = static_cast<double>(u.device_ns_total) / 1e9;
  j["memory_byte_seconds_total"] = u.memory_byte_seconds_total;
  j["policy"] = t.policy;
  j["dead_processes"] = t.dead_processes;
  Json processes = Json::array();
  for (const slice::ProcessView& p : t.processes) {
    Json process;
    process["pid"] = p.pid;
    process["name"] = p.comm;
    process["memory_used_bytes"] = on.process_memory(p);
    add_overhead(process, on.process_reconciled(p), on.process_overhead(p));
    processes.push_back(std::move(process));
  }
  j["processes"] = std::move(processes);
  return j;
}

}  // namespace

void print_status_json(const CoordinatorStatus& s) {
  Json devices = Json::array();
  for (const DeviceStatus& d : s.devices) {
    Json device;
    device["index"] = d.index;
    device["uuid"] = d.uuid;
    device["name"] = d.name;
    device["total_bytes"] = d.total_bytes;
    device["used_bytes"] = d.used_bytes;
    Json tenants = Json::array();
    for (const TenantOnDevice& on : d.tenants) tenants.push_back(tenant_json(on));
    device["tenants"] = std::move(tenants);
    devices.push_back(std::move(device));
  }
  Json j;
  j["devices"] = std::move(devices);
  j["coordinator"] = s.dir;
  j["idle"] = s.idle;  // no libslice process has run with this coordinator yet
  j["warnings"] = s.warnings;
  const std::string text = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  std::printf("%s\n", text.c_str());
}

}  // namespace slicectl
