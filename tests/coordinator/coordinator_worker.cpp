// coordinator_worker: one process of a tenant, for the multi-process coordinator tests. It joins a
// tenant as libslice.so would (on fake GPUs, see fake_gpu.h) and runs one command; the tests start
// many of these, kill them at will and check the shared state from outside. Run with --help.
#include <sys/prctl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "coordinator.h"
#include "coordinator_view.h"
#include "fake_gpu.h"
#include "quantity.h"

namespace {

constexpr const char* kUsage = R"(usage: coordinator_worker --dir DIR --tenant NAME [options] COMMAND [ARGS]

Joins tenant NAME of the coordinator in DIR on fake GPUs and runs COMMAND on the first of them.

options:
  --memory Q|P%       this process's memory limit wish (bytes, 512Mi, 4Gi, 25%); default none
  --device-bytes N    size of each fake GPU in bytes (default 16Gi)
  --gpu K             use fake GPU K (UUID and name derived from K); repeat for more; default 0
  --sync              after joining print "joined" and wait for a line on standard input

commands:
  join                  print "ready" and sleep until killed
  hold BYTES            reserve BYTES, print "ready" and sleep until killed;
                        or print "refused usage=U cap=C" and exit 3
  reserve-once BYTES    reserve BYTES and exit (giving them back): print "ok", or
                        "refused usage=U cap=C" and exit 3
  hammer SECONDS SIZE   reserve and release SIZE bytes as fast as possible for SECONDS; after every
                        reservation check that the tenant's usage is within its cap; print
                        "ops=N refused=R violations=V max_op_us=M" (M: slowest reserve+release pair)
  recount-loop SECONDS  recount the tenant over and over; print "recounts=N failed=F"
  stall-recount         take the tenant's recount flag, print "ready" and sleep (a stopped recounter)
  stall-join            does not join: open the tenant file, take its initialisation lock, mark its
                        limits as being written, print "ready" and sleep (killed mid-registration)
  reap                  does not join: reap the tenant's dead processes; print "reaped N" or "error M"

exit status: 0 done, 2 bad arguments, 3 refused, 4 could not join (the reason on standard error)
)";

int usage_error(const std::string& what) {
  std::fprintf(stderr, "coordinator_worker: %s\n%s", what.c_str(), kUsage);
  return 2;
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

[[noreturn]] void sleep_until_killed() {
  for (;;) pause();
}

void wait_for_go() {
  say("joined");
  std::string line;
  std::getline(std::cin, line);
}

bool parse_bytes(const std::string& text, std::uint64_t& out) {
  auto r = slice::parse_byte_quantity(text);
  if (!r.value) return false;
  out = *r.value;
  return true;
}

std::string refusal_text(const slice::Refusal& why) {
  return "refused usage=" + std::to_string(why.usage) + " cap=" + std::to_string(why.cap);
}

}  // namespace

int main(int argc, char** argv) {
  // Never outlive the test that started us, whatever happens to it.
  prctl(PR_SET_PDEATHSIG, SIGKILL);

  slice::JoinRequest request;
  std::optional<slice::MemoryLimit> memory;
  std::uint64_t device_bytes = slice::test::kFakeGpuBytes;
  std::vector<int> gpus;
  bool sync = false;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    const std::string opt = argv[i];
    if (opt == "--help" || opt == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (opt == "--sync") {
      sync = true;
      continue;
    }
    if (i + 1 >= argc) return usage_error(opt + " needs a value");
    const std::string value = argv[++i];
    if (opt == "--dir") {
      request.dir = value;
    } else if (opt == "--policy-dir") {
      request.policy_dir = value;
    } else if (opt == "--tenant") {
      request.tenant = value;
    } else if (opt == "--memory") {
      auto r = slice::parse_memory_limit(value);
      if (!r.value) return usage_error("--memory " + value + ": " + r.reason);
      memory = r.value;
    } else if (opt == "--device-bytes") {
      if (!parse_bytes(value, device_bytes) || device_bytes == 0) return usage_error("bad --device-bytes " + value);
    } else if (opt == "--gpu") {
      gpus.push_back(std::atoi(value.c_str()));
    } else {
      return usage_error("unknown option " + opt);
    }
  }
  if (request.dir.empty() || request.tenant.empty()) return usage_error("--dir and --tenant are required");
  // The tests' layout: the policy folder beside the coordinator folder.
  if (request.policy_dir.empty()) request.policy_dir = request.dir.substr(0, request.dir.rfind('/')) + "/policy";
  if (i >= argc) return usage_error("no command");
  const std::string command = argv[i++];
  const std::vector<std::string> args(argv + i, argv + argc);
  auto number_arg = [&](std::size_t k, std::uint64_t& out) { return k < args.size() && parse_bytes(args[k], out); };

  std::string error;
  if (command == "reap") {
    if (sync) wait_for_go();
    const int reaped = slice::reap_tenant(request.dir, request.tenant, error);
    say(reaped >= 0 ? "reaped " + std::to_string(reaped) : "error " + error);
    return reaped >= 0 ? 0 : 4;
  }
  if (command == "stall-join") {
    // What join does before it claims a slot: prepare, open, take the initialisation lock; and what
    // the first process does while it writes the tenant's limits.
    if (!slice::prepare_coordinator_dir(request.dir, error)) return say("error " + error), 4;
    auto tenant =
        slice::TenantFileHandle::open(request.dir, request.tenant, slice::TenantFileHandle::Mode::create, error);
    if (!tenant) return say("error " + error), 4;
    if (!tenant->lock_init(2'000'000'000ull)) return say("error init lock busy"), 4;
    std::uint32_t unregistered = 0;
    tenant->file().header.limits_state.compare_exchange_strong(unregistered, 1);
    say("ready");
    sleep_until_killed();
  }

  if (gpus.empty()) gpus.push_back(0);
  for (int k : gpus) request.devices.push_back(slice::test::fake_gpu(k, memory, device_bytes));
  std::vector<std::string> warnings;
  auto c = slice::Coordinator::join(request, error, warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
  if (!c) {
    std::fprintf(stderr, "coordinator_worker: %s\n", error.c_str());
    say("error " + error);
    return 4;
  }
  if (sync) wait_for_go();

  std::uint64_t bytes = 0, seconds = 0;
  slice::Refusal why;
  if (command == "join") {
    say("ready");
    sleep_until_killed();
  } else if (command == "hold" && number_arg(0, bytes)) {
    if (!c->reserve(0, bytes, &why)) return say(refusal_text(why)), 3;
    say("ready");
    sleep_until_killed();
  } else if (command == "reserve-once" && number_arg(0, bytes)) {
    if (!c->reserve(0, bytes, &why)) return say(refusal_text(why)), 3;
    say("ok");
    return 0;
  } else if (command == "hammer" && number_arg(0, seconds) && number_arg(1, bytes)) {
    const std::uint64_t cap = c->cap(0);
    const std::uint64_t end = slice::monotonic_ns() + seconds * 1'000'000'000ull;
    std::uint64_t ops = 0, refused = 0, violations = 0, max_op_ns = 0;
    for (std::uint64_t now = slice::monotonic_ns(); now < end;) {
      if (c->reserve(0, bytes)) {
        if (c->usage(0) > cap) ++violations;  // someone passed the cap together with us
        c->release(0, bytes);
        ++ops;
      } else {
        ++refused;
      }
      const std::uint64_t after = slice::monotonic_ns();
      if (after - now > max_op_ns) max_op_ns = after - now;
      now = after;
    }
    say("ops=" + std::to_string(ops) + " refused=" + std::to_string(refused) +
        " violations=" + std::to_string(violations) + " max_op_us=" + std::to_string(max_op_ns / 1000));
    return 0;
  } else if (command == "recount-loop" && number_arg(0, seconds)) {
    const std::uint64_t end = slice::monotonic_ns() + seconds * 1'000'000'000ull;
    std::uint64_t recounts = 0, failed = 0;
    while (slice::monotonic_ns() < end) ++(c->ledger().recount() >= 0 ? recounts : failed);
    say("recounts=" + std::to_string(recounts) + " failed=" + std::to_string(failed));
    return 0;
  } else if (command == "stall-recount") {
    std::uint32_t none = 0;
    if (!c->tenant_file().file().header.recount_owner.compare_exchange_strong(none, c->slot() + 1))
      return say("error a recount is under way"), 4;
    say("ready");
    sleep_until_killed();
  }
  return usage_error("bad command or arguments: " + command);
}
