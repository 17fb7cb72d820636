#include "help_text.h"

#include "config_values.h"

namespace slicectl {

#define SLICECTL_COORDINATOR_HELP                                                              \
  "  --coordinator DIR  the coordinator directory (default: $SLICE_COORDINATOR_DIR, else\n"    \
  "                     " SLICE_DEFAULT_COORDINATOR_DIR                                        \
  "); the same one the programs under libslice use\n"                                          \
  "  --policy-dir DIR   the administrator's policy folder (default: $SLICE_POLICY_DIR, else\n" \
  "                     " SLICE_DEFAULT_POLICY_DIR ")\n"

#define SLICECTL_ARCHIVE_HELP                                                                      \
  "  --archive FILE     the usage archive, an SQLite database (default: $SLICECTL_ARCHIVE, else\n" \
  "                     /var/lib/libslice/usage.sqlite3)\n"

const char* const kMainUsage =
    "usage: slicectl SUBCOMMAND [OPTIONS]\n"
    "What the libslice coordinator holds, and an administrator's limits for its tenants.\n"
    "\n"
    "subcommands:\n"
    "  status [--json]    per GPU the tenants on it and their processes, memory used / cap, compute\n"
    "                     share, limit and priority, and the device time each got over 1 s and 10 s\n"
    "  set TENANT ...     set a tenant's limits as an administrator (root): they win over the\n"
    "                     tenant's own SLICE_* variables\n"
    "  gc [TENANT]        return the memory of dead processes not yet reaped, of one tenant or all\n"
    "  usage [--since TIME] [--csv]\n"
    "                     per tenant and GPU the device time received and the memory held over\n"
    "                     time (device-hours, GiB-hours), for chargeback\n"
    "  rm TENANT [--force]  remove a tenant whose processes have all exited, and its usage record\n"
    "  top                the same as status, redrawn every second in the terminal (q quits)\n"
    "  metrics [--listen ADDR:PORT]\n"
    "                     the same figures in Prometheus text format, or served at /metrics\n"
    "  archive            copy the tenants' usage records into the usage archive, which outlasts\n"
    "                     reboots (a timer runs it every few minutes)\n"
    "  prepare            as root at boot: the coordinator and policy folders, and the live files of\n"
    "                     the tenants that policies manage\n"
    "\n"
    "options of every subcommand (--coordinator may also come before it):\n" SLICECTL_COORDINATOR_HELP
    "  --help, -h         the subcommand's own help (slicectl SUBCOMMAND --help)\n"
    "\n"
    "A machine where no libslice process has run yet is idle: status, top, metrics, usage and gc\n"
    "answer with no tenants and exit 0.\n"
    "exit status: 0 done, 1 could not be done (a coordinator that cannot be read, not root, ...),\n"
    "2 wrong command line\n";

const char* const kStatusUsage =
    "usage: slicectl status [--json] [--coordinator DIR]\n"
    "Per GPU (every GPU NVML sees, numbered as nvidia-smi numbers them, not by CUDA ordinals, which\n"
    "differ between processes; then any other GPU a tenant used, in UUID order) its name, size and\n"
    "the memory its tenants use; per tenant its\n"
    "memory used and cap, compute share and limit, priority, its live processes, and the share of\n"
    "the GPU's time it received over the last second and the last ten (COMPUTE 1s, 10s), measured\n"
    "as libslice's compute scheduler measures it; - when none of its processes has measured it yet.\n"
    "OVERHEAD: of the memory used, what the driver holds beyond the allocations libslice charged\n"
    "(module globals, heap and stack limits...), reconciled with NVML's per-process figure at most a\n"
    "second old when the process reports or launches; - not measured yet, n/a where NVML cannot see\n"
    "the process (a PID namespace).\n"
    "A tenant marked * has limits from an administrator's policy (slicectl set). Tenant files\n"
    "that cannot be read, ignored policy files and dead processes not yet reaped are listed below.\n"
    "\n"
    "  --json             one JSON object instead of the table:\n"
    "                     {\"devices\":[{\"index\",\"uuid\",\"name\",\"total_bytes\",\"used_bytes\",\n"
    "                      \"tenants\":[{\"name\",\"priority\",\"memory_limit_bytes\",\"memory_used_bytes\",\n"
    "                       \"memory_overhead_bytes\",\"memory_overhead\",\n"
    "                       \"compute_share\",\"compute_limit\",\"compute_used_1s\",\"compute_used_10s\",\n"
    "                       \"device_seconds_total\",\"memory_byte_seconds_total\",\n"
    "                       \"policy\",\"dead_processes\",\"processes\":[{\"pid\",\"name\",\"memory_used_bytes\",\n"
    "                       \"memory_overhead_bytes\",\"memory_overhead\"}]}]}],\n"
    "                      \"coordinator\",\"idle\",\"warnings\":[...]}\n"
    "                     memory_limit_bytes is null when there is no cap; memory_overhead_bytes\n"
    "                     (part of memory_used_bytes) is null unless memory_overhead is\n"
    "                     \"measured\" (else \"not measured yet\" or \"not measurable\"); compute_used_1s and\n"
    "                     compute_used_10s are fractions (0 to 1) of the GPU's time, null when\n"
    "                     not measured yet; device_seconds_total and memory_byte_seconds_total\n"
    "                     are the tenant's cumulative device time and memory held over time on\n"
    "                     the GPU, as slicectl usage reports them\n" SLICECTL_COORDINATOR_HELP;

const char* const kSetUsage =
    "usage: slicectl set TENANT [--memory Q|P%|none] [--memory-gpu UUID=Q|P%|none ...]\n"
    "                    [--compute P] [--limit P] [--priority high|normal|low] [--group GROUP]\n"
    "                    [--coordinator DIR] [--policy-dir DIR]\n"
    "       slicectl set TENANT --remove\n"
    "Writes the administrator's policy of TENANT (POLICY-DIR/TENANT, root-owned, persistent): its\n"
    "limits win over the tenant's own SLICE_* variables, and running processes take them at their\n"
    "next allocation; after a reboot, its processes are held to it from their first allocation.\n"
    "Options not given keep the values the policy had. Needs root. Prints the policy.\n"
    "The tenant's file (DIR/tenants/TENANT) becomes root's, writable by its group, so that its\n"
    "processes cannot delete it to start again from zero usage: run them as members of that group.\n"
    "After a reboot `slicectl prepare` (libslice-prepare.service) makes it again, before they start.\n"
    "\n"
    "  --memory Q|P%|none     VRAM cap on every GPU: bytes (1073741824), a quantity (512Mi, 4Gi,\n"
    "                         1.5Gi, 4G = 4*10^9), or a percentage of the GPU (25%); none removes\n"
    "                         the policy's cap (the tenant's own cap applies again)\n"
    "  --memory-gpu UUID=Q    the cap on one GPU, by its UUID as slicectl status shows it\n"
    "                         (GPU-5a1c0e2f-...=8Gi); wins over --memory there; UUID=none removes it;\n"
    "                         may be given several times\n"
    "  --group GROUP          the group (name or number) whose members run the tenant's processes;\n"
    "                         without it, only root may write the tenant's file (kept in the policy)\n"
    "  --remove               remove the policy: the tenant's own limits hold again\n"
    "  --compute P            compute share: percent of GPU time guaranteed under contention (1-100)\n"
    "  --limit P              compute limit: hard ceiling, percent of GPU time (1-100)\n"
    "  --priority high|normal|low\n"
    "                         high is served first; low only fills idle time\n"
    "  --coordinator DIR      the coordinator directory (default: $SLICE_COORDINATOR_DIR, else\n"
    "                         " SLICE_DEFAULT_COORDINATOR_DIR
    ")\n"
    "  --policy-dir DIR       the policy folder (default: $SLICE_POLICY_DIR, else " SLICE_DEFAULT_POLICY_DIR
    ")\n"
    "\n"
    "example: sudo slicectl set inference --memory 8Gi --compute 30 --priority high\n";

const char* const kGcUsage =
    "usage: slicectl gc [TENANT] [--coordinator DIR]\n"
    "Reaps the dead processes of TENANT, or of every tenant: frees their slots and gives their\n"
    "memory back to the tenant. libslice does this by itself when a tenant next needs the memory;\n"
    "gc does it now. Prints how many were reaped per tenant. Needs write access to the tenant's\n"
    "file (root, or the tenant's own user). Without TENANT it also removes the markers that crashed\n"
    "processes of this PID namespace left in members/ (how children find their tenant).\n"
    "\n" SLICECTL_COORDINATOR_HELP;

const char* const kTopUsage =
    "usage: slicectl top [--interval SECONDS] [--once] [--coordinator DIR]\n"
    "The coordinator live in the terminal, redrawn every --interval seconds: per GPU a bar of its\n"
    "memory by tenant and a bar of its time by tenant (received over the last second), each tenant\n"
    "in its own letter and colour; per tenant its live processes, memory used / cap, compute share\n"
    "and the share of the GPU's time it received over 1 s and 10 s (as slicectl status shows them).\n"
    "Fits the window (80 columns and up; resizing redraws). q or Ctrl-C quits. When standard output\n"
    "is not a terminal it prints one snapshot, without escape sequences, and exits. NO_COLOR set:\n"
    "no colours.\n"
    "\n"
    "  --interval SECONDS  time between redraws, 0.1 to 3600 (default 1)\n"
    "  --once              one snapshot, even on a terminal\n"
    "  --coordinator DIR   the coordinator directory (default: $SLICE_COORDINATOR_DIR, else\n"
    "                      " SLICE_DEFAULT_COORDINATOR_DIR ")\n";

const char* const kMetricsUsage =
    "usage: slicectl metrics [--listen ADDR:PORT] [--coordinator DIR]\n"
    "The figures of slicectl status --json in Prometheus text format (0.0.4), labelled device\n"
    "(the index slicectl status shows), uuid and tenant: slice_device_memory_{total,used}_bytes,\n"
    "slice_tenant_memory_{used,cap}_bytes, slice_tenant_compute_{share,limit}_ratio,\n"
    "slice_tenant_compute_received_{1s,10s}_ratio, slice_tenant_processes,\n"
    "slice_tenant_dead_processes and slice_coordinator_warnings; and the counters of\n"
    "slicectl usage, slice_tenant_device_seconds_total and slice_tenant_memory_byte_seconds_total.\n"
    "Ratios are fractions (0 to 1); a figure that is unknown (no cap, not measured yet) has no\n"
    "sample.\n"
    "\n"
    "  --listen ADDR:PORT  serve them over HTTP at /metrics for Prometheus to scrape, read afresh\n"
    "                      for each scrape, until SIGINT or SIGTERM; :PORT or PORT listen on\n"
    "                      127.0.0.1 only (0.0.0.0:PORT: every interface); port 0 takes a free\n"
    "                      one. The first line printed is the address: listening on\n"
    "                      http://127.0.0.1:9400/metrics. An idle machine (no coordinator yet)\n"
    "                      has the GPUs' series and no tenant's; 503 while the coordinator\n"
    "                      cannot be read.\n"
    "  --coordinator DIR   the coordinator directory (default: $SLICE_COORDINATOR_DIR, else\n"
    "                      " SLICE_DEFAULT_COORDINATOR_DIR
    ")\n"
    "\n"
    "exit status: 0 done (or stopped by a signal), 1 the port is in use or the coordinator cannot\n"
    "be read, 2 wrong command line (a bad ADDR:PORT)\n";

const char* const kUsageReportUsage =
    "usage: slicectl usage [--since TIME] [--csv] [--coordinator DIR] [--archive FILE]\n"
    "Per tenant and per GPU (by UUID), what it used, to bill it by: the device time it received\n"
    "(seconds and hours, as libslice's compute scheduler measures it) and the memory it held over\n"
    "time (GiB-hours, and byte-seconds: 1 GiB held for an hour is 1 GiB-hour). A process's memory\n"
    "counts while it lives. Each tenant's live record begins with its first process and is kept\n"
    "after its processes exit, until a reboot or slicectl rm; the records slicectl archive copied\n"
    "into the usage archive before that are added to it. FROM and TO say the period covered.\n"
    "\n"
    "  --since TIME       only what was used from TIME on, instead of since the record began.\n"
    "                     TIME is a UTC date or date and time, with an optional Z or UTC\n"
    "                     (2026-11-30, 2026-11-30T14:00, 2026-11-30T14:00:30Z), or a duration\n"
    "                     back from now: N followed by s, m, h, d or w (90m, 24h, 7d).\n"
    "                     Granularity: the record keeps one sample per hour for 35 days and the\n"
    "                     totals now; between them usage is taken as spread evenly. FROM is later\n"
    "                     than TIME when the record (or its 35 days) begins later.\n"
    "  --csv              comma-separated values with a header row, one row per tenant and GPU:\n"
    "                     tenant,gpu_uuid,gpu_name,from,to,device_seconds,device_hours,\n"
    "                     memory_gib_hours,memory_byte_seconds,live_processes\n"
    "                     (times in UTC, ISO 8601; a tenant that never used a GPU has one row\n"
    "                     with gpu_uuid empty)\n" SLICECTL_COORDINATOR_HELP SLICECTL_ARCHIVE_HELP;

const char* const kArchiveUsage =
    "usage: slicectl archive [--coordinator DIR] [--archive FILE]\n"
    "Copies every tenant's live usage record (its totals now and its hourly samples) into the usage\n"
    "archive, which outlasts reboots and slicectl rm; slicectl usage reads both. Running it again\n"
    "is harmless. libslice-archive.timer runs it every 5 minutes and libslice-prepare.service as the\n"
    "machine stops: a crash loses at most what was used since the last run. Needs write access to\n"
    "FILE's folder (root, for /var/lib/libslice).\n"
    "\n" SLICECTL_COORDINATOR_HELP SLICECTL_ARCHIVE_HELP;

const char* const kPrepareUsage =
    "usage: slicectl prepare [--coordinator DIR] [--policy-dir DIR]\n"
    "As root, before any GPU process (libslice-prepare.service runs it at boot): makes the\n"
    "coordinator folder (root's, shared and sticky), the policy folder (root's), and for every tenant\n"
    "that a policy manages its live file, root's and writable by the policy's group. Without that file\n"
    "a managed tenant's processes refuse to start: they may not make it themselves, or they could\n"
    "delete it and start again from zero usage. Running it again is harmless.\n"
    "\n" SLICECTL_COORDINATOR_HELP;

const char* const kRmUsage =
    "usage: slicectl rm TENANT [--force] [--coordinator DIR] [--archive FILE]\n"
    "Removes TENANT's file from the coordinator: slicectl status no longer lists it, and its next\n"
    "process starts a new usage record. Its live record is archived first (slicectl archive), so\n"
    "that slicectl usage still reports it; where it cannot be archived, nothing is removed. Refused\n"
    "while any process of the tenant is alive. Needs write access to the tenant's file and the right\n"
    "to remove it (root, or the file's owner). An administrator's policy for the tenant is kept.\n"
    "\n"
    "  --force            remove it even with dead processes not yet reaped (never with a live one),\n"
    "                     and even when its record cannot be archived\n" SLICECTL_COORDINATOR_HELP
        SLICECTL_ARCHIVE_HELP;

const char* usage_of(std::string_view subcommand) {
  if (subcommand == "status") return kStatusUsage;
  if (subcommand == "set") return kSetUsage;
  if (subcommand == "gc") return kGcUsage;
  if (subcommand == "usage") return kUsageReportUsage;
  if (subcommand == "rm") return kRmUsage;
  if (subcommand == "top") return kTopUsage;
  if (subcommand == "metrics") return kMetricsUsage;
  if (subcommand == "archive") return kArchiveUsage;
  if (subcommand == "prepare") return kPrepareUsage;
  return kMainUsage;
}

}  // namespace slicectl
