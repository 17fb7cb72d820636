// slicectl status --json: the contract's keys (ARCHITECTURE.md part A), and a few more.
#include <cstdio>

#include "json_writer.h"
#include "limits_text.h"
#include "status_model.h"

namespace slicectl {

namespace {

// Of memory_used_bytes, what the driver holds beyond the charged calls: null until measured, and
// where NVML cannot see the processes; memory_overhead says which.
void write_overhead(JsonWriter& j, slice::Reconciled r, std::uint64_t bytes) {
  j.key("memory_overhead_bytes");
  j.number_or_null(r == slice::Reconciled::measured ? std::optional(bytes) : std::nullopt);
  j.key("memory_overhead");
  j.string(r == slice::Reconciled::measured       ? "measured"
           : r == slice::Reconciled::unmeasurable ? "not measurable"
                                                  : "not measured yet");
}

void write_tenant(JsonWriter& j, const TenantOnDevice& on) {
  const slice::TenantView& t = *on.tenant;
  const slice::TenantGpuView& u = on.usage();
  j.begin_object();
  j.key("name");
  j.string(t.name);
  j.key("priority");
  j.string(slice::to_string(t.priority));
  j.key("memory_limit_bytes");
  j.number_or_null(u.cap_bytes == slice::kNoLimit ? std::nullopt : std::optional(u.cap_bytes));
  j.key("memory_used_bytes");
  j.number(u.used_bytes);
  write_overhead(j, u.reconciled, u.overhead_bytes);
  j.key("compute_share");
  j.number(std::uint64_t{u.compute_share});  // on this GPU
  j.key("compute_limit");
  j.number(std::uint64_t{t.compute_limit});
  j.key("compute_used_1s");  // fractions 0..1; null while the tenant has no history on the GPU
  j.decimal_or_null(u.compute_used_1s);
  j.key("compute_used_10s");
  j.decimal_or_null(u.compute_used_10s);
  // Metering (cumulative on this GPU since the tenant's record began; see slicectl usage).
  j.key("device_seconds_total");
  j.decimal(static_cast<double>(u.device_ns_total) / 1e9);
  j.key("memory_byte_seconds_total");
  j.decimal(u.memory_byte_seconds_total);
  j.key("policy");
  j.boolean(t.policy);
  j.key("dead_processes");
  j.number(std::int64_t{t.dead_processes});
  j.key("processes");
  j.begin_array();
  for (const slice::ProcessView& p : t.processes) {
    j.begin_object();
    j.key("pid");
    j.number(std::int64_t{p.pid});
    j.key("name");
    j.string(p.comm);
    j.key("memory_used_bytes");
    j.number(on.process_memory(p));
    write_overhead(j, on.process_reconciled(p), on.process_overhead(p));
    j.end_object();
  }
  j.end_array();
  j.end_object();
}

}  // namespace

void print_status_json(const CoordinatorStatus& s) {
  JsonWriter j;
  j.begin_object();
  j.key("devices");
  j.begin_array();
  for (const DeviceStatus& d : s.devices) {
    j.begin_object();
    j.key("index");
    j.number(std::int64_t{d.index});
    j.key("uuid");
    j.string(d.uuid);
    j.key("name");
    j.string(d.name);
    j.key("total_bytes");
    j.number(d.total_bytes);
    j.key("used_bytes");
    j.number(d.used_bytes);
    j.key("tenants");
    j.begin_array();
    for (const TenantOnDevice& on : d.tenants) write_tenant(j, on);
    j.end_array();
    j.end_object();
  }
  j.end_array();
  j.key("coordinator");
  j.string(s.dir);
  j.key("idle");  // no libslice process has run with this coordinator yet
  j.boolean(s.idle);
  j.key("warnings");
  j.begin_array();
  for (const std::string& w : s.warnings) j.string(w);
  j.end_array();
  j.end_object();
  std::printf("%s\n", j.text().c_str());
}

}  // namespace slicectl
