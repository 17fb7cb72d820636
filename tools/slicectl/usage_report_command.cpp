// slicectl usage [--since TIME] [--csv]: per tenant and per GPU the device time received and the
// memory held over time, from each tenant's live usage record (usage_history.h) and the archived
// ones (usage_archive.h), as a table or as CSV, for chargeback.
#include <algorithm>
#include <cstdio>
#include <optional>

#include "cli.h"
#include "commands.h"
#include "coordinator_view.h"
#include "status_model.h"
#include "text_table.h"
#include "usage_archive.h"
#include "usage_series.h"
#include "usage_history.h"
#include "usage_meter.h"
#include "usage_time.h"

namespace slicectl {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// What one tenant used on one GPU over one period.
struct UsageRow {
  std::string tenant;
  std::string uuid, gpu_name;  // empty: the tenant has not used any GPU
  std::uint64_t from_ms = 0, to_ms = 0;
  double device_seconds = 0;
  double memory_byte_seconds = 0;
  std::size_t live_processes = 0;
  bool history_short = false;  // --since asked for more than the record's samples reach back
};

UsageRow row_of(const UsageSeries& series, std::optional<std::uint64_t> since) {
  UsageRow r{series.tenant, series.uuid, series.gpu_name};
  r.live_processes = series.live_processes;
  const UsageOver u = usage_over(series, since);
  r.from_ms = u.from_ms;
  r.to_ms = u.to_ms;
  r.device_seconds = u.device_seconds;
  r.memory_byte_seconds = u.memory_byte_seconds;
  r.history_short = u.history_short;
  return r;
}

std::string fixed(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, value);
  return buf;
}

// A CSV field: quoted when it holds a comma, a quote or a line break (device names come from the
// tenant's own file).
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

void print_csv(const std::vector<UsageRow>& rows) {
  std::printf(
      "tenant,gpu_uuid,gpu_name,from,to,device_seconds,device_hours,memory_gib_hours,memory_byte_seconds,"
      "live_processes\n");
  for (const UsageRow& r : rows)
    std::printf("%s,%s,%s,%s,%s,%s,%s,%s,%s,%zu\n", r.tenant.c_str(), csv_field(shown(r.uuid, 64)).c_str(),
                csv_field(shown(r.gpu_name)).c_str(), slice::utc_text(r.from_ms).c_str(),
                slice::utc_text(r.to_ms).c_str(), fixed(r.device_seconds, 3).c_str(),
                fixed(r.device_seconds / 3600, 6).c_str(), fixed(r.memory_byte_seconds / kGiB / 3600, 6).c_str(),
                fixed(r.memory_byte_seconds, 0).c_str(), r.live_processes);
}

void print_table(const std::string& dir, const std::vector<UsageRow>& rows, std::optional<std::uint64_t> since) {
  if (rows.empty()) {
    std::printf("no tenants at %s\n", shown(dir, 200).c_str());
    return;
  }
  const std::string from = since ? "from " + slice::utc_text(*since) : "from the start of each tenant's record";
  std::uint64_t to = 0;
  for (const UsageRow& r : rows) to = std::max(to, r.to_ms);
  std::printf("usage at %s, %s to %s\n", shown(dir, 200).c_str(), from.c_str(), slice::utc_text(to).c_str());
  using A = TextTable::Align;
  TextTable table({A::left, A::left, A::left, A::left, A::right, A::right, A::right, A::right, A::right});
  table.add({"TENANT", "GPU", "NAME", "FROM", "DEVICE-SECONDS", "DEVICE-HOURS", "MEMORY-GiB-HOURS",
             "MEMORY-BYTE-SECONDS", "PROCESSES"});
  bool short_history = false;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const UsageRow& r = rows[i];
    const bool used_gpu = !r.uuid.empty();
    short_history = short_history || r.history_short;
    table.add({r.tenant, used_gpu ? shown(r.uuid, 64) : "-", used_gpu ? shown(r.gpu_name, 24) : "(no GPU yet)",
               slice::utc_text(r.from_ms) + (r.history_short ? " +" : ""), fixed(r.device_seconds, 1),
               fixed(r.device_seconds / 3600, 3), fixed(r.memory_byte_seconds / kGiB / 3600, 3),
               fixed(r.memory_byte_seconds, 0), std::to_string(r.live_processes)});
    // A tenant on several GPUs gets its sum below its rows.
    std::size_t first = i;
    while (first > 0 && rows[first - 1].tenant == r.tenant) --first;
    const bool last_of_tenant = i + 1 == rows.size() || rows[i + 1].tenant != r.tenant;
    if (!last_of_tenant || first == i) continue;
    double device = 0, memory = 0;
    for (std::size_t k = first; k <= i; ++k) device += rows[k].device_seconds, memory += rows[k].memory_byte_seconds;
    table.add({r.tenant, "total", "", "", fixed(device, 1), fixed(device / 3600, 3), fixed(memory / kGiB / 3600, 3),
               fixed(memory, 0), std::to_string(r.live_processes)});
  }
  std::fputs(table.render("").c_str(), stdout);
  if (short_history) std::printf("+ the record's samples reach back only to FROM (35 days are kept)\n");
}

}  // namespace

int run_usage(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  ArchiveOption archive;
  bool csv = false;
  std::optional<std::uint64_t> since;
  std::string value;
  while (!args.done()) {
    if (args.flag("--csv")) {
      csv = true;
    } else if (args.option("--since", value)) {
      const auto at = slice::parse_since(value, slice::wall_clock_ms());
      if (!at) invalid_option("--since", value, at.reason, "2026-11-30T14:00Z, or 24h");
      since = *at.value;
    } else if (!common.read(args) && !archive.read(args)) {
      unknown_option(args.peek());
    }
  }
  const std::string& dir = common.coordinator;
  const std::vector<slice::TenantView> tenants = read_live_tenants(common);
  std::vector<std::string> warnings;
  // What was archived before (a reboot, slicectl rm), then the live records.
  std::vector<ArchivedRecord> archived;
  std::string error;
  if (auto store = UsageArchive::open_for_reading(archive.path, error); store) {
    if (!store->load(archived, error)) warnings.push_back(error + ": only the live records are reported");
  } else if (!error.empty()) {
    warnings.push_back(error + ": only the live records are reported");
  }
  std::vector<UsageRow> rows;
  for (const UsageSeries& series : usage_series(tenants, archived)) rows.push_back(row_of(series, since));
  for (const slice::TenantView& t : tenants) {
    if (!t.readable) {
      warnings.push_back("tenant '" + t.name + "' cannot be read: " + t.problem);
      continue;
    }
    bool recorded = false;
    for (const slice::TenantGpuView& g : t.gpus) recorded = recorded || g.usage_started_ms != 0;
    if (!recorded) {
      UsageRow r;
      r.tenant = t.name;
      r.from_ms = r.to_ms = t.read_wall_ms;
      r.live_processes = t.processes.size();
      rows.push_back(r);
    }
  }
  std::stable_sort(rows.begin(), rows.end(), [](const UsageRow& a, const UsageRow& b) { return a.tenant < b.tenant; });
  if (csv)
    print_csv(rows);
  else
    print_table(dir, rows, since);
  std::fflush(stdout);
  for (const std::string& w : warnings) std::fprintf(stderr, "slicectl usage: %s\n", w.c_str());
  return kExitOk;
}

}  // namespace slicectl
