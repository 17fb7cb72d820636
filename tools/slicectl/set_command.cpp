// slicectl set TENANT ...: an administrator's limits for a tenant, merged into its policy file
// (policy.h) and read back to show what now holds.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "config_values.h"
#include "coordinator_view.h"
#include "gpu_uuid.h"
#include "limits_text.h"
#include "policy.h"
#include "printable.h"
#include "quantity.h"

namespace slicectl {

namespace {

constexpr const char* kExampleUuid = "GPU-5a1c0e2f-8d3b-4c1a-9e7f-0123456789ab";

// What the command line asks to change; anything not given keeps the policy's value.
struct Changes {
  std::string tenant;
  std::optional<std::optional<slice::MemoryLimit>> memory;           // inner nullopt: remove ("none")
  std::map<std::string, std::optional<slice::MemoryLimit>> per_gpu;  // nullopt: remove
  std::optional<unsigned> compute_share;
  std::optional<unsigned> compute_limit;
  std::optional<slice::Priority> priority;
  std::optional<unsigned> group;  // the group whose members run the tenant's processes
  bool remove = false;            // --remove: the policy goes, the tenant's own limits hold again

  bool empty() const { return !memory && per_gpu.empty() && !compute_share && !compute_limit && !priority && !group; }
};

// "none", or a cap as parse_memory_limit reads it.
std::optional<slice::MemoryLimit> memory_value(std::string_view option, std::string_view text,
                                               std::string_view shown_as, std::string_view example) {
  if (text == "none") return std::nullopt;
  auto limit = slice::parse_memory_limit(text);
  if (!limit) invalid_option(option, shown_as, limit.reason + " (or none to remove the cap)", example);
  return limit.value;
}

void read_memory_gpu(const std::string& value, Changes& c) {
  const std::string example = std::string(kExampleUuid) + "=8Gi";
  const auto eq = value.find('=');
  if (eq == std::string::npos) invalid_option("--memory-gpu", value, "expected UUID=Q", example);
  const auto uuid = slice::canonical_gpu_uuid(std::string_view(value).substr(0, eq));
  if (!uuid)
    invalid_option("--memory-gpu", value,
                   "'" + slice::printable(value.substr(0, eq)) +
                       "' is not a GPU UUID (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, as slicectl status shows it)",
                   example);
  c.per_gpu[*uuid] = memory_value("--memory-gpu", std::string_view(value).substr(eq + 1), value, example);
}

unsigned percent_value(std::string_view option, const std::string& value, std::string_view example) {
  auto p = slice::parse_percent(value);
  if (!p) invalid_option(option, value, p.reason, example);
  return *p.value;
}

// A group by name or number.
unsigned group_value(const std::string& value) {
  if (!value.empty() && value.find_first_not_of("0123456789") == std::string::npos && value.size() < 10)
    return static_cast<unsigned>(std::stoul(value));
  if (const group* g = getgrnam(value.c_str())) return g->gr_gid;
  invalid_option("--group", value, "no such group", "gpu-users");
  return 0;
}

Changes read_changes(ArgReader& args, CommonOptions& common) {
  Changes c;
  std::string value;
  while (!args.done()) {
    if (args.option("--memory", value)) {
      c.memory = memory_value("--memory", value, value, "4Gi");
    } else if (args.option("--memory-gpu", value)) {
      read_memory_gpu(value, c);
    } else if (args.option("--compute", value)) {
      c.compute_share = percent_value("--compute", value, "30");
    } else if (args.option("--limit", value)) {
      c.compute_limit = percent_value("--limit", value, "50");
    } else if (args.flag("--remove")) {
      c.remove = true;
    } else if (args.option("--group", value)) {
      c.group = group_value(value);
    } else if (args.option("--priority", value)) {
      auto p = slice::parse_priority(value);
      if (!p) invalid_option("--priority", value, p.reason, "high");
      c.priority = p.value;
    } else if (common.read(args)) {
    } else if (!args.peek().empty() && args.peek()[0] != '-' && c.tenant.empty()) {
      c.tenant = args.take();
    } else {
      unknown_option(args.peek());
    }
  }
  if (c.tenant.empty()) usage_error("which tenant? give its name: slicectl set TENANT --memory 4Gi");
  check_tenant_argument(c.tenant, "slicectl set team-a --memory 4Gi");
  if (c.remove && !c.empty())
    usage_error("--remove takes the whole policy away: give it alone (slicectl set team-a --remove)");
  if (!c.remove && c.empty())
    usage_error(
        "nothing to set: give at least one of --memory, --memory-gpu, --compute, --limit, --priority, --group, or "
        "--remove");
  return c;
}

void apply(const Changes& c, slice::Policy& p) {
  if (c.memory) p.memory = *c.memory;
  for (const auto& [uuid, limit] : c.per_gpu) {
    // The policy file has no "none" for one GPU: removing the entry lets --memory (or the
    // tenant's own cap) hold there again.
    if (limit)
      p.per_gpu[uuid] = limit;
    else
      p.per_gpu.erase(uuid);
  }
  if (c.compute_share) p.compute_share = *c.compute_share;
  if (c.compute_limit) p.compute_limit = *c.compute_limit;
  if (c.priority) p.priority = *c.priority;
  if (c.group) p.group = *c.group;  // kept in the policy: root makes the tenant's file again at boot
}

// The policy's settings without the comment line, indented; "(empty ...)" when it sets nothing.
std::string settings_of(const slice::Policy& p, const std::string& tenant) {
  std::istringstream in(p.to_text(tenant));
  std::string line, out;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') out += "  " + line + "\n";
  return out.empty() ? "  (empty: the tenant's own limits hold)\n" : out;
}

void print_in_effect(const CommonOptions& common, const std::string& tenant) {
  std::string error;
  const auto tenants = slice::read_coordinator(common.coordinator, common.policy_dir, error);
  for (const slice::TenantView& t : tenants) {
    // A tenant that never met a GPU (its file was just made for it here) has not started.
    if (t.name != tenant || (t.readable && t.gpus.empty() && t.processes.empty())) continue;
    if (!t.readable) {
      std::printf("tenant '%s' cannot be read (%s): its processes take the policy at their next allocation\n",
                  tenant.c_str(), t.problem.c_str());
      return;
    }
    std::printf("now in effect for tenant '%s': compute share %u%%, limit %u%%, priority %s\n", tenant.c_str(),
                t.compute_share, t.compute_limit, std::string(slice::to_string(t.priority)).c_str());
    for (const slice::TenantGpuView& g : t.gpus)
      std::printf("  %s  %s  cap %s (uses %s), compute share %u%%\n", g.uuid.c_str(), shown(g.name).c_str(),
                  slice::describe_bytes(g.cap_bytes).c_str(), slice::describe_bytes(g.used_bytes).c_str(),
                  g.compute_share);
    // PolicyWatcher: a process that started before the coordinator had any policy looks for the
    // policy folder once a second; after that a change holds at its next allocation.
    std::printf(
        "its running processes take the new limits at their next allocation (within a second if\n"
        "they started before this coordinator had any policy)\n");
    return;
  }
  std::printf("tenant '%s' has not started yet: its first process takes this policy\n", tenant.c_str());
}

}  // namespace

int run_set(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  const Changes changes = read_changes(args, common);
  const std::string& dir = common.coordinator;
  const std::string& policies = common.policy_dir;
  if (geteuid() != 0)
    fail("only root may set limits: the policy folder " + slice::printable(policies, 200) +
         " belongs to root, so that tenants cannot change their own limits (run: sudo slicectl set ...)");

  std::string error;
  if (changes.remove) {
    struct stat st {};
    const bool had = lstat((policies + "/" + changes.tenant).c_str(), &st) == 0;
    if (!slice::remove_policy(policies, changes.tenant, error)) fail(error);
    if (had)
      std::printf(
          "policy of tenant '%s' removed: its own limits (its first process's SLICE_* variables) hold from its\n"
          "processes' next allocation\n",
          changes.tenant.c_str());
    else
      std::printf("tenant '%s' had no policy in %s: nothing to remove\n", changes.tenant.c_str(),
                  shown(policies, 200).c_str());
    return kExitOk;
  }

  slice::Policy policy;
  std::string message;
  switch (slice::read_policy(policies, changes.tenant, policy, message)) {
    case slice::PolicyStatus::ok:
    case slice::PolicyStatus::none:
      break;
    case slice::PolicyStatus::untrusted:
    case slice::PolicyStatus::invalid:
      std::fprintf(stderr, "slicectl set: warning: %s; it is replaced\n", message.c_str());
      policy = {};
      break;
  }
  apply(changes, policy);
  if (policy.compute_share && policy.compute_limit && *policy.compute_share > *policy.compute_limit)
    std::fprintf(stderr, "slicectl set: warning: compute share %u%% is above the limit %u%%: the limit holds\n",
                 *policy.compute_share, *policy.compute_limit);

  if (!slice::write_policy(policies, changes.tenant, policy, error)) fail(error);
  // A managed tenant's file is root's, so that its processes cannot delete it and start again from
  // zero usage; they write it as members of its group (kept in the policy for `slicectl prepare`).
  std::string notice;
  if (!slice::adopt_tenant_file(dir, changes.tenant, policy.group, error, &notice))
    fail(
        "the policy is written, and the tenant's running processes follow it, but its live file is not yet "
        "root's: " +
        error);
  if (!notice.empty()) std::fprintf(stderr, "slicectl set: warning: %s\n", notice.c_str());
  // Read it back as every process will: what holds is what they read.
  slice::Policy now;
  if (slice::read_policy(policies, changes.tenant, now, message) != slice::PolicyStatus::ok)
    fail("the policy was written but is not in effect: " + message);
  std::printf("policy of tenant '%s' (%s/%s):\n%s", changes.tenant.c_str(), shown(policies, 200).c_str(),
              changes.tenant.c_str(), settings_of(now, changes.tenant).c_str());
  print_in_effect(common, changes.tenant);
  return kExitOk;
}

}  // namespace slicectl
