#include "plugin_server.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "device_plugin_service.h"
#include "slice_health.h"

namespace slice::k8s {
namespace {

using namespace std::chrono_literals;

constexpr auto kWatchPeriod = 200ms;    // how soon a kubelet restart or a signal is noticed
constexpr auto kRegisterRetry = 1s;     // between attempts while the kubelet is not there
constexpr auto kRegisterDeadline = 5s;  // for one Register call
constexpr auto kShutdownGrace = 1s;     // open ListAndWatch streams are cancelled after it

std::atomic<bool> g_stopping{false};

void on_stop_signal(int) { g_stopping.store(true); }  // async-signal-safe: one atomic store

// Which file a socket path is now: the kubelet recreating its socket changes the inode.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
  bool exists = false;
  bool operator==(const FileIdentity&) const = default;
};

FileIdentity identity_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};
  return {st.st_dev, st.st_ino, true};
}

bool register_with_kubelet(const PluginOptions& options, std::string& error) {
  auto channel = grpc::CreateChannel("unix://" + options.kubelet_socket_path(), grpc::InsecureChannelCredentials());
  auto stub = v1beta1::Registration::NewStub(channel);
  v1beta1::RegisterRequest request;
  request.set_version("v1beta1");
  request.set_endpoint(options.socket_name);
  request.set_resource_name(options.resource_name);
  *request.mutable_options() = plugin_options_message();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kRegisterDeadline);
  v1beta1::Empty reply;
  const grpc::Status status = stub->Register(&context, request, &reply);
  if (status.ok()) return true;
  error = status.error_message();
  return false;
}

class ServedPlugin {
 public:
  ServedPlugin(const PluginOptions& options, const Inventory& inventory, SliceHealth& health)
      : options_(options), service_(options, inventory, health, g_stopping) {}
  ~ServedPlugin() { stop(); }

  bool start(std::string& error) {
    const std::string path = options_.socket_path();
    ::unlink(path.c_str());  // a stale socket of an earlier run
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + path, grpc::InsecureServerCredentials());
    builder.RegisterService(&service_);
    // The socket is made by bind(), with the umask's mode: 0777 under umask 000, and whoever may
    // connect may Allocate slices. Only the kubelet (root) needs it.
    const mode_t umask_before = ::umask(0177);  // 0600
    server_ = builder.BuildAndStart();
    ::umask(umask_before);
    if (!server_) {
      constexpr std::size_t kLongestSocketPath = 107;  // sun_path holds 108 bytes with the NUL
      error = "cannot serve on " + path +
              (path.size() > kLongestSocketPath ? " (a Unix socket's path has at most 107 characters)" : "");
      return false;
    }
    socket_ = identity_of(path);
    return true;
  }
  void stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
    server_.reset();
    // Only our own socket: a kubelet that restarted may have put something else there.
    if (identity_of(options_.socket_path()) == socket_) ::unlink(options_.socket_path().c_str());
  }
  bool socket_intact() const { return identity_of(options_.socket_path()) == socket_; }

 private:
  const PluginOptions& options_;
  DevicePluginService service_;
  std::unique_ptr<grpc::Server> server_;
  FileIdentity socket_;
};

bool sleep_unless_stopping(std::chrono::milliseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
    if (g_stopping.load()) return false;
    std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(kWatchPeriod, d));
  }
  return !g_stopping.load();
}

}  // namespace

int run_plugin(const PluginOptions& options, const Inventory& inventory, NvmlLibrary& nvml) {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  ::sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);

  SliceHealth health(inventory);
  health.check(nvml);
  std::thread health_thread([&] {
    const auto period = std::chrono::milliseconds(static_cast<long long>(options.health_interval_s * 1000));
    while (sleep_unless_stopping(period)) health.check(nvml);
  });

  int exit_code = 0;
  while (!g_stopping.load()) {
    ServedPlugin plugin(options, inventory, health);
    std::string error;
    if (!plugin.start(error)) {
      spdlog::error("{}", error);
      exit_code = 1;
      break;
    }
    // Register, retrying while the kubelet is away.
    FileIdentity kubelet;
    bool registered = false;
    while (!registered && !g_stopping.load()) {
      kubelet = identity_of(options.kubelet_socket_path());
      if (kubelet.exists && register_with_kubelet(options, error)) {
        registered = true;
        spdlog::info("registered {} with the kubelet ({}), serving {}", options.resource_name,
                     options.kubelet_socket_path(), options.socket_path());
      } else {
        spdlog::debug("kubelet not ready at {}: {}", options.kubelet_socket_path(),
                      kubelet.exists ? error : std::string("no socket"));
        sleep_unless_stopping(kRegisterRetry);
      }
    }
    // Watch for a kubelet restart: a new kubelet.sock, or our socket wiped.
    while (!g_stopping.load()) {
      std::this_thread::sleep_for(kWatchPeriod);
      const FileIdentity now = identity_of(options.kubelet_socket_path());
      if (now.exists && !(now == kubelet)) {
        spdlog::info("the kubelet's socket was recreated (kubelet restart): registering again");
        break;
      }
      if (!plugin.socket_intact()) {
        spdlog::info("the plugin's socket {} was removed (kubelet restart): serving again", options.socket_path());
        break;
      }
    }
  }  // each round's ServedPlugin stops and removes its socket here
  health.stop();
  health_thread.join();
  spdlog::info("stopped; socket {} removed", options.socket_path());
  return exit_code;
}

}  // namespace slice::k8s
