// slicectl gc [TENANT]: reaps dead processes now (libslice also does it by itself when a tenant
// next needs the memory), and says how many per tenant; without TENANT also removes the lineage
// markers of processes that are gone (libslice/coordinator/lineage.h: a crash leaves its marker).
#include <sys/stat.h>

#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "coordinator_view.h"
#include "lineage.h"
#include "tenant_file.h"
#include "printable.h"
#include "sigbus_guard.h"
#include "status_model.h"

namespace slicectl {

namespace {
// Reaping writes a tenant's file through a shared mapping, which its tenant may truncate: that
// tenant is reported and the others are still reaped. (The recount flag or slot left mid-way is
// ours: the kernel drops our locks when slicectl exits, and others then see us dead.)
int reap_guarded(const std::string& dir, const std::string& tenant, std::string& error) {
  int reaped = -1;
  if (!run_without_sigbus([&] { reaped = slice::reap_tenant(dir, tenant, error); })) {
    error = "its file changed size while it was being reaped (truncated by its tenant?): skipped";
    reaped = -1;
  }
  return reaped;
}
}  // namespace

int run_gc(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  std::string only;
  while (!args.done()) {
    if (common.read(args)) continue;
    if (!args.peek().empty() && args.peek()[0] != '-' && only.empty())
      only = args.take();
    else
      unknown_option(args.peek());
  }
  if (!only.empty()) check_tenant_argument(only, "slicectl gc team-a");
  const std::string& dir = common.coordinator;

  std::vector<std::string> tenants;
  if (!only.empty()) {
    struct stat st {};
    if (stat((dir + "/tenants/" + only).c_str(), &st) != 0)
      fail("no tenant '" + only + "' at " + slice::printable(dir, 200));
    tenants.push_back(only);
  } else {
    for (const slice::TenantView& t : read_live_tenants(common)) tenants.push_back(t.name);  // none: idle
    if (tenants.empty()) std::printf("no tenants at %s\n", shown(dir, 200).c_str());
  }

  int rc = kExitOk;
  for (const std::string& t : tenants) {
    std::string error;
    const int reaped = reap_guarded(dir, t, error);
    if (reaped < 0) {
      std::fflush(stdout);
      std::fprintf(stderr, "slicectl gc: tenant '%s': %s\n", t.c_str(), error.c_str());
      rc = kExitFailure;
      continue;
    }
    std::printf("tenant '%s': %d dead process%s reaped\n", t.c_str(), reaped, reaped == 1 ? "" : "es");
  }
  if (only.empty()) {
    // Only markers of this PID namespace can be told dead from here (a container's are its own).
    const int markers = slice::remove_stale_markers(dir);
    if (markers > 0) std::printf("%d marker%s of gone processes removed\n", markers, markers == 1 ? "" : "s");
    // Lock files of no tenant, or another user's planted before the tenant's own (issue 29).
    const int locks = slice::remove_stray_lock_files(dir);
    if (locks > 0)
      std::printf("%d stray file%s removed (lock files not their tenant's, an adoption's leftovers)\n", locks,
                  locks == 1 ? "" : "s");
  }
  return rc;
}

}  // namespace slicectl
