#include "session.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "accounts.h"
#include "caller_backtrace.h"
#include "coordinator_layout.h"
#include "compute.h"
#include "crash_handler.h"
#include "fork_guard.h"
#include "keep_errno.h"
#include "limits_text.h"
#include "lineage.h"
#include "log.h"
#include "policy.h"
#include "reconcile.h"
#include "shim.h"
#include "tenant_file.h"

namespace slice::shim {

namespace detail {
constinit std::atomic<SessionState> g_state{SessionState::fresh};
constinit std::atomic<Session*> g_session{nullptr};
}  // namespace detail
using detail::g_session;
using detail::g_state;

namespace {
// Guards start-up only; re-made in a forked child (another thread may have held it at the fork).
std::mutex g_start_mu;

// The configuration, parsed once per process; a forked child keeps it (it did not exec, so its
// environment is the parent's).
struct ParsedConfig {
  std::once_flag once;
  std::optional<Config> config;
  std::string error;
};
// Made on first use, never at load time (nothing of libslice may run in a process that never
// calls CUDA), and never destroyed (hooks may run while the process exits). No static guard: a fork
// may come at any time (racing threads make one each, and all but the first are given back).
std::atomic<ParsedConfig*> g_parsed_config{nullptr};
ParsedConfig& parsed_config() {
  ParsedConfig* config = g_parsed_config.load(std::memory_order_acquire);
  if (config != nullptr) return *config;
  auto* made = new ParsedConfig();
  if (g_parsed_config.compare_exchange_strong(config, made, std::memory_order_acq_rel)) return *made;
  delete made;
  return *config;
}

void parse_once() {
  const KeepErrno keep;  // the log file opened, variables read: not the call's doing
  try {
    ConfigResult result = parse_config(process_slice_environment(), secure_execution());
    if (result.config) {
      parsed_config().config = std::move(result.config);
      if (!parsed_config().config->disable) {
        log::configure(parsed_config().config->log_level, parsed_config().config->log_file);
        if (!result.notice.empty()) log::warn(result.notice);
      }
    } else {
      parsed_config().error = result.error.message();
    }
  } catch (const std::exception& e) {
    parsed_config().error = std::string("reading the SLICE_* variables failed: ") + e.what();
  }
}

void fail_closed(const std::string& why) {
  log::error(why +
             "; every CUDA call now fails with CUDA_ERROR_INVALID_VALUE (fix it, or set "
             "SLICE_DISABLE=1 to run without libslice)");
  g_state.store(SessionState::failed, std::memory_order_release);
}

// This process's name, for a tenant of its own (/proc/self/comm).
std::string program_name() {
  char comm[32] = {};
  if (FILE* f = std::fopen("/proc/self/comm", "re")) {
    if (std::fgets(comm, sizeof comm, f) == nullptr) comm[0] = '\0';
    std::fclose(f);
  }
  return comm;
}

bool enumerate_devices(Session& s, std::string& error) {
  const auto get_count = SLICE_REAL(cuDeviceGetCount);
  const auto get = SLICE_REAL(cuDeviceGet);
  const auto get_name = SLICE_REAL(cuDeviceGetName);
  const auto total_mem = SLICE_REAL(cuDeviceTotalMem_v2);
  // cuDeviceGetUuid_v2 came with CUDA 11.4 drivers; older ones have only cuDeviceGetUuid (same
  // answer for a physical GPU).
  auto get_uuid = SLICE_REAL(cuDeviceGetUuid_v2);
  if (get_uuid == nullptr) get_uuid = reinterpret_cast<decltype(get_uuid)>(SLICE_REAL(cuDeviceGetUuid));
  if (get_count == nullptr || get == nullptr || get_name == nullptr || total_mem == nullptr || get_uuid == nullptr) {
    error = "the driver lacks a function libslice needs to tell GPUs apart (cuDeviceGetUuid, ...)";
    return false;
  }
  int count = 0;
  if (get_count(&count) != CUDA_SUCCESS) {
    error = "cuDeviceGetCount failed";
    return false;
  }
  if (count > kMaxDevices) {
    error = std::to_string(count) + " GPUs are visible; libslice slices at most " + std::to_string(kMaxDevices) +
            " per process (set CUDA_VISIBLE_DEVICES)";
    return false;
  }
  for (int i = 0; i < count; ++i) {
    SessionDevice d;
    d.ordinal = i;
    CUuuid uuid{};
    char name[256] = {};
    std::size_t total = 0;
    if (get(&d.handle, i) != CUDA_SUCCESS || get_uuid(&uuid, d.handle) != CUDA_SUCCESS ||
        get_name(name, sizeof name - 1, d.handle) != CUDA_SUCCESS || total_mem(&total, d.handle) != CUDA_SUCCESS) {
      error = "the driver did not describe device " + std::to_string(i);
      return false;
    }
    std::memcpy(d.uuid.data(), uuid.bytes, 16);
    d.uuid_text = uuid_text(d.uuid.data());
    d.name = name;
    d.total_bytes = total;
    s.devices.push_back(std::move(d));
  }
  return true;
}

// A process that exits normally gives back its memory and its slot at once, instead of leaving
// them to the next recount (and a "dead process" in slicectl status).
void leave_at_exit() {
  if (g_state.load() != SessionState::running) return;
  Session* s = g_session.load();
  if (s == nullptr) return;
  if (s->compute) s->compute->stop();  // before the driver is torn down, and before the slot goes
  unmark_member(s->config.coordinator_dir);
  s->coordinator->leave();
}

std::string cap_text(std::uint64_t cap) { return cap == kNoLimit ? "no cap" : "cap " + describe_bytes(cap); }

}  // namespace

void session_after_fork_in_child() noexcept {
  // The parent's membership and records are not the child's: start again from nothing if the
  // child uses CUDA. The old session is left allocated (its locks may be held by threads that do
  // not exist here).
  new (&g_start_mu) std::mutex();
  if (g_state.load() == SessionState::running) {
    g_session.store(nullptr);
    g_state.store(SessionState::fresh);
  }
}

Session::Session()
    : pools(std::make_unique<PoolAccounts>()),
      vmm(std::make_unique<VmmAccounts>()),
      ipc(std::make_unique<IpcAccounts>()),
      managed(std::make_unique<ManagedAccounts>()) {}
Session::~Session() = default;

int Session::index_of(CUdevice device) const {
  for (const SessionDevice& d : devices)
    if (d.handle == device) return d.ordinal;
  return -1;
}

int Session::index_of_uuid(const std::string& text) const {
  for (const SessionDevice& d : devices)
    if (d.uuid_text == text) return d.ordinal;
  return -1;
}

SessionState session_state() noexcept { return g_state.load(std::memory_order_acquire); }

const Config* session_config() noexcept {
  std::call_once(parsed_config().once, parse_once);
  return parsed_config().config ? &*parsed_config().config : nullptr;
}

bool disabled() noexcept {
  const Config* c = session_config();
  return c != nullptr && c->disable;
}

CUresult start_session() noexcept {
  const KeepErrno keep;     // files opened, created, locked and mapped: none of the program's business
  install_fork_handlers();  // g_start_mu and the session are made anew in a child
  std::lock_guard<std::mutex> lock(g_start_mu);
  switch (g_state.load()) {
    case SessionState::running:
    case SessionState::passthrough:
      return CUDA_SUCCESS;
    case SessionState::failed:
      return CUDA_ERROR_INVALID_VALUE;
    case SessionState::fresh:
      break;
  }
  const Config* config = session_config();
  if (config == nullptr) {
    fail_closed(parsed_config().error);
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (config->disable) {
    g_state.store(SessionState::passthrough);
    return CUDA_SUCCESS;
  }
  if (config->crash_handler) install_crash_handlers();  // before anything of ours can fault
  try {
    auto s = std::make_unique<Session>();
    s->config = *config;
    // Unnamed: the tenant of the nearest member in this process's lineage, else one of its own
    // (libslice/coordinator/lineage.h). Nothing is written into the environment: children find
    // their tenant the same way, whatever environment they were given.
    std::string inherited_from;
    if (s->config.tenant.empty()) {
      if (std::optional<std::string> t = inherited_tenant(s->config.coordinator_dir)) {
        s->config.tenant = *t;
        inherited_from = " (inherited from its lineage)";
      } else {
        s->config.tenant = new_tenant_name(program_name());
      }
    }
    std::string error;
    if (!enumerate_devices(*s, error)) {
      fail_closed("libslice could not read the GPUs: " + error);
      return CUDA_ERROR_INVALID_VALUE;
    }
    JoinRequest request;
    request.dir = s->config.coordinator_dir;
    request.policy_dir = s->config.policy_dir;
    request.tenant = s->config.tenant;
    request.compute_share = s->config.compute_share.every_device;
    request.compute_limit = s->config.compute_limit;
    request.priority = s->config.priority;
    for (const SessionDevice& d : s->devices) {
      // By UUID first (SLICE_MEMORY_LIMIT_GPU_<uuid>), then by this process's ordinal.
      DeviceInfo info{d.uuid, d.name, d.total_bytes, s->config.memory_limit.for_device(d.ordinal, d.uuid_text),
                      std::nullopt};
      if (s->config.compute_share.set_for_device(d.ordinal, d.uuid_text))
        info.compute_share = s->config.compute_share.for_device(d.ordinal, d.uuid_text);
      request.devices.push_back(std::move(info));
    }
    std::vector<std::string> warnings;
    s->coordinator = Coordinator::join(request, error, warnings);
    if (!s->coordinator) {
      fail_closed("libslice could not join the coordinator in " + request.dir + " as tenant '" + request.tenant +
                  "': " + error);
      return CUDA_ERROR_INVALID_VALUE;
    }
    for (const std::string& w : warnings) log::warn(w);
    if (std::string why; !mark_member(request.dir, s->config.tenant, why))
      log::warn("libslice could not mark this process as a member of tenant '" + s->config.tenant + "' (" + why +
                "): processes it starts without SLICE_TENANT will start tenants of their own");
    s->compute = std::make_unique<Compute>(*s);
    if (log::enabled(LogLevel::info)) {
      std::string line = "tenant '" + s->config.tenant + "'" + inherited_from + " joined " + request.dir + ":";
      for (const SessionDevice& d : s->devices)
        line += " GPU " + std::to_string(d.ordinal) + " (" + d.uuid_text + ") " +
                cap_text(s->coordinator->cap(d.ordinal)) + ";";
      log::info(line);
    }
    static std::once_flag exit_hook_once;
    std::call_once(exit_hook_once, [] { std::atexit(leave_at_exit); });
    g_session.store(s.release(), std::memory_order_release);  // lives as long as the process
    g_state.store(SessionState::running, std::memory_order_release);
    return CUDA_SUCCESS;
  } catch (const std::exception& e) {
    fail_closed(std::string("libslice could not start: ") + e.what());
    return CUDA_ERROR_INVALID_VALUE;
  }
}

Session* detail::start_running_session(bool& failed) noexcept {
  const KeepErrno keep;
  SessionState state = g_state.load(std::memory_order_acquire);
  if (state == SessionState::fresh) {
    // The application initialised the driver without our cuInit (or not at all: then the driver
    // answers CUDA_ERROR_NOT_INITIALIZED itself and we stay fresh). A bad configuration or
    // SLICE_DISABLE decides at once.
    const Config* config = session_config();
    const auto count_devices = SLICE_REAL(cuDeviceGetCount);
    int count = 0;
    if (config == nullptr || config->disable || (count_devices != nullptr && count_devices(&count) == CUDA_SUCCESS))
      start_session();
    state = g_state.load(std::memory_order_acquire);
  }
  failed = state == SessionState::failed;
  return state == SessionState::running ? g_session.load(std::memory_order_acquire) : nullptr;
}

Session* current_session() noexcept {
  return g_state.load(std::memory_order_acquire) == SessionState::running ? g_session.load(std::memory_order_acquire)
                                                                          : nullptr;
}

namespace {
std::atomic<std::uint64_t> g_context_generation{0};
}  // namespace

void contexts_changed() noexcept { g_context_generation.fetch_add(1, std::memory_order_release); }
std::uint64_t contexts_generation() noexcept { return g_context_generation.load(std::memory_order_acquire); }

CurrentContext current_context(const Session& s) noexcept {
  thread_local CUcontext cached = nullptr;
  thread_local int cached_device = -1;
  thread_local std::uint64_t cached_generation = ~0ull;
  CUcontext ctx = nullptr;
  const auto get_current = SLICE_REAL(cuCtxGetCurrent);
  if (get_current == nullptr || get_current(&ctx) != CUDA_SUCCESS || ctx == nullptr) return {};
  const std::uint64_t generation = g_context_generation.load(std::memory_order_acquire);
  if (ctx != cached || generation != cached_generation) {
    CUdevice device = 0;
    const auto get_device = SLICE_REAL(cuCtxGetDevice);
    if (get_device == nullptr || get_device(&device) != CUDA_SUCCESS) return {};
    cached = ctx;
    cached_device = s.index_of(device);
    cached_generation = generation;
  }
  return {reinterpret_cast<std::uint64_t>(ctx), cached_device};
}

namespace {
thread_local struct {
  bool known = false;
  std::uint64_t generation = 0;
  CurrentContext context;
} t_launch_context;
}  // namespace

void current_context_changed_here() noexcept { t_launch_context.known = false; }

CurrentContext launch_context(const Session& s) noexcept {
  const std::uint64_t generation = g_context_generation.load(std::memory_order_acquire);
  if (t_launch_context.known && t_launch_context.generation == generation) return t_launch_context.context;
  const CurrentContext c = current_context(s);
  if (c.key != 0) t_launch_context = {true, generation, c};
  return c;
}

bool charge_after_refusal(Session& s, int device, std::uint64_t bytes, const char* what, Refusal& why) {
  const KeepErrno keep;
  // Pools may have given memory back at a synchronisation since we last looked, and the driver may
  // hold less beyond the charges than it did (shim/reconcile.h).
  if (settle_pools(s, device) && s.coordinator->reserve(device, bytes, &why)) return true;
  if (reconcile(s, device, kReconcileRefusalNs) && s.coordinator->reserve(device, bytes, &why)) return true;
  if (log::enabled(LogLevel::warn)) {
    const SessionDevice& d = s.devices[device];
    log::warn("tenant '" + s.config.tenant + "' GPU " + std::to_string(d.ordinal) + " (" + d.uuid_text + "): " + what +
              " of " + describe_bytes(bytes) + " (" + std::to_string(bytes) + " bytes) refused: usage " +
              describe_bytes(why.usage) + " of " + cap_text(why.cap) + "; CUDA_ERROR_OUT_OF_MEMORY");
    if (log::enabled(LogLevel::debug)) log::debug("refused at:\n" + caller_backtrace());
  }
  return false;
}

}  // namespace slice::shim
