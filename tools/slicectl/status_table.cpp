// slicectl status for a person: one aligned table per GPU, then the notes that need attention.
#include <cstdio>
#include <optional>
#include <string>

#include "cli.h"
#include "limits_text.h"
#include "status_model.h"
#include "text_table.h"

namespace slicectl {

namespace {

using Align = TextTable::Align;

// 25%: how much of `whole` `part` is; "-" when there is no whole.
std::string percent_of(std::uint64_t part, std::uint64_t whole) {
  if (whole == 0 || whole == slice::kNoLimit) return "-";
  const long double p = static_cast<long double>(part) * 100.0L / static_cast<long double>(whole);
  char s[32];
  std::snprintf(s, sizeof s, "%.0Lf%%", p);
  return s;
}

// 29.8%: a share of device time (0..1) as a percentage; "-" when not measured.
std::string share_text(std::optional<double> share) {
  if (!share) return "-";
  char s[32];
  std::snprintf(s, sizeof s, "%.1f%%", *share * 100.0);
  return s;
}

std::string device_heading(const DeviceStatus& d) {
  return "GPU " + std::to_string(d.index) + "  " + shown(d.name) + "  " + d.uuid + "  " +
         slice::describe_bytes(d.used_bytes) + " of " + slice::describe_bytes(d.total_bytes) + " used (" +
         percent_of(d.used_bytes, d.total_bytes) + ")";
}

// Of the memory used, what the driver holds beyond the charged calls (reconciled with its own
// figure): "-" before any process measured it, "n/a" where NVML cannot see the processes.
std::string overhead_text(slice::Reconciled r, std::uint64_t bytes) {
  if (r == slice::Reconciled::measured) return slice::describe_bytes(bytes);
  return r == slice::Reconciled::unmeasurable ? "n/a" : "-";
}

std::string device_table(const DeviceStatus& d) {
  TextTable t({Align::left, Align::right, Align::right, Align::right, Align::right, Align::right, Align::right,
               Align::left, Align::right, Align::right});
  t.add(
      {"TENANT / PROCESS", "MEMORY USED", "OVERHEAD", "CAP", "USE", "SHARE", "LIMIT", "PRIORITY", "COMPUTE 1s", "10s"});
  for (const TenantOnDevice& on : d.tenants) {
    const slice::TenantView& tenant = *on.tenant;
    const slice::TenantGpuView& u = on.usage();
    t.add({tenant.name + (tenant.policy ? " *" : ""), slice::describe_bytes(u.used_bytes),
           overhead_text(u.reconciled, u.overhead_bytes), slice::describe_bytes(u.cap_bytes),
           percent_of(u.used_bytes, u.cap_bytes), std::to_string(u.compute_share) + "%",
           std::to_string(tenant.compute_limit) + "%", std::string(slice::to_string(tenant.priority)),
           share_text(u.compute_used_1s), share_text(u.compute_used_10s)});
    for (const slice::ProcessView& p : tenant.processes)
      t.add({"  " + std::to_string(p.pid) + " " + shown(p.comm, 16), slice::describe_bytes(on.process_memory(p)),
             overhead_text(on.process_reconciled(p), on.process_overhead(p))});
    if (tenant.processes.empty()) t.add({"  (no live process)"});
  }
  return t.render("  ");
}

}  // namespace

void print_status_table(const CoordinatorStatus& s) {
  const std::size_t n = s.tenants.size();
  if (s.idle)
    std::printf("coordinator %s: idle (no libslice process has run with it yet); %zu GPU%s\n",
                shown(s.dir, 200).c_str(), s.devices.size(), s.devices.size() == 1 ? "" : "s");
  else
    std::printf("coordinator %s: %zu tenant%s on %zu GPU%s\n", shown(s.dir, 200).c_str(), n, n == 1 ? "" : "s",
                s.devices.size(), s.devices.size() == 1 ? "" : "s");
  bool any_policy = false;
  for (const DeviceStatus& d : s.devices) {
    if (d.tenants.empty()) {
      std::printf("\n%s\n  (no tenant)\n", device_heading(d).c_str());
      continue;
    }
    std::printf("\n%s\n%s", device_heading(d).c_str(), device_table(d).c_str());
    for (const TenantOnDevice& on : d.tenants) any_policy |= on.tenant->policy;
  }
  std::string notes;
  if (s.devices.empty() && !s.nvml_note.empty()) notes += s.nvml_note + "\n";
  if (any_policy) notes += "* limits set by an administrator (slicectl set)\n";
  for (const slice::TenantView& t : s.tenants) {
    if (!t.readable) continue;
    if (t.gpus.empty())
      notes += "tenant '" + t.name + "': no GPU yet, " + std::to_string(t.processes.size()) + " live process" +
               (t.processes.size() == 1 ? "" : "es") + "\n";
    if (t.dead_processes > 0)
      notes += "tenant '" + t.name + "': " + dead_process_note(t.dead_processes) + " (slicectl gc " + t.name + ")\n";
  }
  for (const std::string& w : s.warnings) notes += "warning: " + w + "\n";
  if (!notes.empty()) std::printf("\n%s", notes.c_str());
}

}  // namespace slicectl
