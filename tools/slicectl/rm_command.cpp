// slicectl rm TENANT [--force]: removes a tenant whose processes have all exited, and its usage
// record with it. The removal itself (under the tenant's registration lock, never with a live
// process) is remove_tenant in coordinator_view.
#include <sys/stat.h>

#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "coordinator_view.h"
#include "printable.h"
#include "sigbus_guard.h"
#include "status_model.h"
#include "usage_archive.h"

namespace slicectl {

namespace {
// The checks read the tenant's file through a shared mapping, which its own user may truncate.
bool remove_guarded(const std::string& dir, const std::string& tenant, bool force, std::string& error) {
  bool removed = false;
  if (!run_without_sigbus([&] { removed = slice::remove_tenant(dir, tenant, force, error); })) {
    error = "its file changed size while it was being checked (truncated by its tenant?): not removed";
    removed = false;
  }
  return removed;
}
}  // namespace

int run_rm(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  ArchiveOption archive;
  std::string tenant;
  bool force = false;
  while (!args.done()) {
    if (common.read(args) || archive.read(args)) continue;
    if (args.flag("--force"))
      force = true;
    else if (!args.peek().empty() && args.peek()[0] != '-' && tenant.empty())
      tenant = args.take();
    else
      unknown_option(args.peek());
  }
  if (tenant.empty()) usage_error("which tenant? example: slicectl rm team-a");
  check_tenant_argument(tenant, "slicectl rm team-a");
  const std::string& dir = common.coordinator;
  require_coordinator(dir);
  struct stat st {};
  if (lstat((dir + "/tenants/" + tenant).c_str(), &st) != 0)
    fail("no tenant '" + tenant + "' at " + slice::printable(dir, 200));
  std::string error;
  // Its live usage record goes with the file: archived first, so that `slicectl usage` keeps it.
  bool archived = false;
  if (auto store = UsageArchive::open_for_writing(archive.path, error)) {
    std::vector<slice::TenantView> one;
    for (slice::TenantView& t : read_live_tenants(common))
      if (t.name == tenant) one.push_back(std::move(t));
    std::size_t records = 0;
    archived = store->store(one, records, error);
  }
  if (!archived && !force)
    fail("its usage record could not be archived (" + error + "): not removed (--force removes it anyway)");
  if (!remove_guarded(dir, tenant, force, error)) fail(error);
  std::printf("tenant '%s' removed; its usage record %s\n", tenant.c_str(),
              archived ? ("is kept in " + shown(archive.path, 200)).c_str() : "is lost (not archived)");
  if (stat((common.policy_dir + "/" + tenant).c_str(), &st) == 0)
    std::printf("its policy %s/%s is kept (slicectl set %s --remove, as root, if the tenant is gone for good)\n",
                shown(common.policy_dir, 200).c_str(), tenant.c_str(), tenant.c_str());
  return kExitOk;
}

}  // namespace slicectl
