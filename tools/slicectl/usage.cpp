#include "usage.h"

namespace slicectl {

#define SLICECTL_COORDINATOR_HELP                                                                  \
  "  --coordinator DIR  the coordinator directory (default: $SLICE_COORDINATOR_DIR, else\n"       \
  "                     /dev/shm/libslice); the same one the programs under libslice use\n"

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
    "\n"
    "options of every subcommand (--coordinator may also come before it):\n" SLICECTL_COORDINATOR_HELP
    "  --help, -h         the subcommand's own help (slicectl SUBCOMMAND --help)\n"
    "\n"
    "exit status: 0 done, 1 could not be done (no coordinator, not root, ...), 2 wrong command line\n";

const char* const kStatusUsage =
    "usage: slicectl status [--json] [--coordinator DIR]\n"
    "Per GPU (gathered by UUID across all tenants, numbered in UUID order: not the CUDA ordinals,\n"
    "which differ between processes) its name, size and the memory its tenants use; per tenant its\n"
    "memory used and cap, compute share and limit, priority, its live processes, and the share of\n"
    "the GPU's time it received over the last second and the last ten (COMPUTE 1s, 10s), measured\n"
    "as libslice's compute scheduler measures it; - when none of its processes has measured it yet.\n"
    "A tenant marked * has limits from an administrator's policy (slicectl set). Tenant files\n"
    "that cannot be read, ignored policy files and dead processes not yet reaped are listed below.\n"
    "\n"
    "  --json             one JSON object instead of the table:\n"
    "                     {\"devices\":[{\"index\",\"uuid\",\"name\",\"total_bytes\",\"used_bytes\",\n"
    "                      \"tenants\":[{\"name\",\"priority\",\"memory_limit_bytes\",\"memory_used_bytes\",\n"
    "                       \"compute_share\",\"compute_limit\",\"compute_used_1s\",\"compute_used_10s\",\n"
    "                       \"policy\",\"dead_processes\",\"processes\":[{\"pid\",\"name\",\"memory_used_bytes\"}]}]}],\n"
    "                      \"warnings\":[...]}\n"
    "                     memory_limit_bytes is null when there is no cap; compute_used_1s and\n"
    "                     compute_used_10s are fractions (0 to 1) of the GPU's time, null when\n"
    "                     not measured yet\n" SLICECTL_COORDINATOR_HELP;

const char* const kSetUsage =
    "usage: slicectl set TENANT [--memory Q|P%|none] [--memory-gpu UUID=Q|P%|none ...]\n"
    "                    [--compute P] [--limit P] [--priority high|normal|low] [--group GROUP]\n"
    "                    [--coordinator DIR]\n"
    "Writes the administrator's policy of TENANT (DIR/policy/TENANT, root-owned): its limits win\n"
    "over the tenant's own SLICE_* variables, and running processes take them at their next\n"
    "allocation. Options not given keep the values the policy had. Needs root. Prints the policy.\n"
    "The tenant's file (DIR/tenants/TENANT) becomes root's, writable by its group, so that its\n"
    "processes cannot delete it to start again from zero usage: run them as members of that group.\n"
    "\n"
    "  --memory Q|P%|none     VRAM cap on every GPU: bytes (1073741824), a quantity (512Mi, 4Gi,\n"
    "                         1.5Gi, 4G = 4*10^9), or a percentage of the GPU (25%); none removes\n"
    "                         the policy's cap (the tenant's own cap applies again)\n"
    "  --memory-gpu UUID=Q    the cap on one GPU, by its UUID as slicectl status shows it\n"
    "                         (GPU-5a1c0e2f-...=8Gi); wins over --memory there; UUID=none removes it;\n"
    "                         may be given several times\n"
    "  --group GROUP          the group (name or number) whose members run the tenant's processes;\n"
    "                         without it, only root may write the tenant's file\n"
                         "  --compute P            compute share: percent of GPU time guaranteed under contention (1-100)\n"
    "  --limit P              compute limit: hard ceiling, percent of GPU time (1-100)\n"
    "  --priority high|normal|low\n"
    "                         high is served first; low only fills idle time\n"
    "  --coordinator DIR      the coordinator directory (default: $SLICE_COORDINATOR_DIR, else\n"
    "                         /dev/shm/libslice)\n"
    "\n"
    "example: sudo slicectl set inference --memory 8Gi --compute 30 --priority high\n";

const char* const kGcUsage =
    "usage: slicectl gc [TENANT] [--coordinator DIR]\n"
    "Reaps the dead processes of TENANT, or of every tenant: frees their slots and gives their\n"
    "memory back to the tenant. libslice does this by itself when a tenant next needs the memory;\n"
    "gc does it now. Prints how many were reaped per tenant. Needs write access to the tenant's\n"
    "file (root, or the tenant's own user).\n"
    "\n" SLICECTL_COORDINATOR_HELP;

const char* usage_of(std::string_view subcommand) {
  if (subcommand == "status") return kStatusUsage;
  if (subcommand == "set") return kSetUsage;
  if (subcommand == "gc") return kGcUsage;
  return kMainUsage;
}

}  // namespace slicectl
