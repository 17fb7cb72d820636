// slicectl archive: copies every tenant's live metering record into the usage archive
// (usage_archive.h), so that `slicectl usage` still has it after a reboot or a `slicectl rm`. Run by
// libslice-archive.timer every few minutes and by libslice-prepare.service as the machine stops:
// what a crash can lose is at most what was used since the last run.
#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "status_model.h"
#include "usage_archive.h"

namespace slicectl {

int run_archive(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  ArchiveOption archive;
  while (!args.done()) {
    if (!common.read(args) && !archive.read(args)) unknown_option(args.peek());
  }
  std::string error;
  const std::vector<slice::TenantView> tenants = read_live_tenants(common);
  auto store = UsageArchive::open_for_writing(archive.path, error);
  if (!store) fail(error);
  std::size_t records = 0;
  if (!store->store(tenants, records, error)) fail(error);
  std::size_t unreadable = 0;
  for (const slice::TenantView& t : tenants) unreadable += t.readable ? 0 : 1;
  std::printf("archived %zu record%s of %zu tenant%s into %s\n", records, records == 1 ? "" : "s",
              tenants.size() - unreadable, tenants.size() - unreadable == 1 ? "" : "s",
              shown(archive.path, 200).c_str());
  for (const slice::TenantView& t : tenants)
    if (!t.readable)
      std::fprintf(stderr, "slicectl archive: tenant '%s' cannot be read: %s\n", t.name.c_str(), t.problem.c_str());
  return unreadable == 0 ? kExitOk : kExitFailure;
}

}  // namespace slicectl
