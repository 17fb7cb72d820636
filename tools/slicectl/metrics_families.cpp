// Each metric family is one row of a table below: adding one (a counter the coordinator starts to
// keep) is adding a row. Samples are labelled device (the index slicectl status shows), uuid and,
// for a tenant's, tenant. A sample whose figure is unknown (no cap, not measured yet) is left out
// rather than written as NaN, as Prometheus prefers.
#include "metrics_families.h"

#include <algorithm>
#include <optional>
#include <string_view>

#include "metrics_format.h"

namespace slicectl {

namespace {

using Value = std::optional<SampleValue>;

struct DeviceFamily {
  std::string_view name, type, help;
  Value (*value)(const DeviceStatus&);
};

struct TenantFamily {
  std::string_view name, type, help;
  Value (*value)(const TenantOnDevice&);
};

struct CoordinatorFamily {
  std::string_view name, type, help;
  Value (*value)(const CoordinatorStatus&);
};

Value fraction(std::optional<double> x) { return x ? Value(SampleValue::of(*x)) : std::nullopt; }
Value percent(std::uint32_t p) { return SampleValue::of(p / 100.0); }

const CoordinatorFamily kCoordinatorFamilies[] = {
    {"slice_coordinator_warnings", "gauge",
     "Tenant files that cannot be read and policy files that are ignored (slicectl status lists them).",
     [](const CoordinatorStatus& s) -> Value { return SampleValue::of(std::uint64_t{s.warnings.size()}); }},
};

const DeviceFamily kDeviceFamilies[] = {
    {"slice_device_memory_total_bytes", "gauge", "Memory of the GPU.",
     [](const DeviceStatus& d) -> Value { return SampleValue::of(d.total_bytes); }},
    {"slice_device_memory_used_bytes", "gauge", "Memory the tenants' live processes hold on the GPU.",
     [](const DeviceStatus& d) -> Value { return SampleValue::of(d.used_bytes); }},
};

const TenantFamily kTenantFamilies[] = {
    {"slice_tenant_memory_used_bytes", "gauge", "Memory the tenant's live processes hold on the GPU.",
     [](const TenantOnDevice& on) -> Value { return SampleValue::of(on.usage().used_bytes); }},
    {"slice_tenant_memory_overhead_bytes", "gauge",
     "Of the memory used, what the driver holds beyond the allocations libslice charged (reconciled "
     "with NVML); absent until measured, and where NVML cannot see the processes.",
     [](const TenantOnDevice& on) -> Value {
       if (on.usage().reconciled != slice::Reconciled::measured) return std::nullopt;
       return SampleValue::of(on.usage().overhead_bytes);
     }},
    {"slice_tenant_memory_cap_bytes", "gauge", "The tenant's memory cap on the GPU; absent when it has none.",
     [](const TenantOnDevice& on) -> Value {
       if (on.usage().cap_bytes == slice::kNoLimit) return std::nullopt;
       return SampleValue::of(on.usage().cap_bytes);
     }},
    {"slice_tenant_compute_share_ratio", "gauge",
     "Share of the GPU's time guaranteed to the tenant under contention (0 to 1).",
     [](const TenantOnDevice& on) { return percent(on.usage().compute_share); }},
    {"slice_tenant_compute_limit_ratio", "gauge", "Most of the GPU's time the tenant may take (0 to 1).",
     [](const TenantOnDevice& on) { return percent(on.tenant->compute_limit); }},
    {"slice_tenant_compute_received_1s_ratio", "gauge",
     "Share of the GPU's time the tenant received over the last second (0 to 1); absent until measured.",
     [](const TenantOnDevice& on) { return fraction(on.usage().compute_used_1s); }},
    {"slice_tenant_compute_received_10s_ratio", "gauge",
     "Share of the GPU's time the tenant received over the last ten seconds (0 to 1); absent until measured.",
     [](const TenantOnDevice& on) { return fraction(on.usage().compute_used_10s); }},
    {"slice_tenant_processes", "gauge", "Live processes of the tenant.",
     [](const TenantOnDevice& on) -> Value { return SampleValue::of(std::uint64_t{on.tenant->processes.size()}); }},
    {"slice_tenant_dead_processes", "gauge", "Dead processes of the tenant not yet reaped (slicectl gc).",
     [](const TenantOnDevice& on) -> Value {
       return SampleValue::of(static_cast<std::uint64_t>(std::max(0, on.tenant->dead_processes)));
     }},
    // Metering, for chargeback (slicectl usage): cumulative since the tenant's record began, kept
    // after its processes exit until slicectl rm.
    {"slice_tenant_device_seconds_total", "counter",
     "Device time the tenant received on the GPU, in seconds, as the compute scheduler measures it.",
     [](const TenantOnDevice& on) -> Value {
       return SampleValue::of(static_cast<double>(on.usage().device_ns_total) / 1e9);
     }},
    {"slice_tenant_memory_byte_seconds_total", "counter",
     "Memory the tenant's processes held on the GPU, integrated over time, in byte-seconds.",
     [](const TenantOnDevice& on) -> Value { return SampleValue::of(on.usage().memory_byte_seconds_total); }},
};

Labels device_labels(const DeviceStatus& d) { return {{"device", std::to_string(d.index)}, {"uuid", d.uuid}}; }

}  // namespace

std::string metrics_text(const CoordinatorStatus& s) {
  Exposition out;
  for (const CoordinatorFamily& f : kCoordinatorFamilies) {
    out.family(f.name, f.type, f.help);
    if (const Value v = f.value(s)) out.sample(f.name, {}, *v);
  }
  for (const DeviceFamily& f : kDeviceFamilies) {
    out.family(f.name, f.type, f.help);
    for (const DeviceStatus& d : s.devices)
      if (const Value v = f.value(d)) out.sample(f.name, device_labels(d), *v);
  }
  for (const TenantFamily& f : kTenantFamilies) {
    out.family(f.name, f.type, f.help);
    for (const DeviceStatus& d : s.devices) {
      for (const TenantOnDevice& on : d.tenants) {
        const Value v = f.value(on);
        if (!v) continue;
        Labels labels = device_labels(d);
        labels.emplace_back("tenant", on.tenant->name);
        out.sample(f.name, labels, *v);
      }
    }
  }
  return out.text();
}

}  // namespace slicectl
