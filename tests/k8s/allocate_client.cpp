// k8s_allocate_client: the kubelet's side of one allocation, for the podman test of the device
// plugin (podman_allocate_test.py). It serves the fake kubelet's Registration service on
// DIR/kubelet.sock, prints "kubelet ready", waits for the plugin to register, reads its first
// ListAndWatch, calls Allocate for COUNT healthy slices of GPU GPU_INDEX (in the order the plugin
// lists the GPUs), and prints what came back as one line of JSON:
//   {"registration": {...}, "devices": [...], "allocated": [...],
//    "response": {"envs": {...}, "mounts": [{"host_path", "container_path", "read_only"}],
//                 "devices": [{"host_path", "container_path", "permissions"}], "annotations": {...},
//                 "cdi_devices": [...]}}
//   k8s_allocate_client DIR GPU_INDEX COUNT
// Exit 0 when it printed the JSON, 1 on a failure (said on standard error), 2 on a wrong command line.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fake_kubelet.h"

namespace {

using namespace std::chrono_literals;

// `s` as a JSON string (bytes that are not UTF-8 become U+FFFD).
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

template <typename Map>
std::string object(const Map& map) {
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : std::map<std::string, std::string>(map.begin(), map.end())) {
    out += (first ? "" : ", ") + quoted(k) + ": " + quoted(v);
    first = false;
  }
  return out + "}";
}

std::string list(const std::vector<std::string>& items) {
  std::string out = "[";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quoted(items[i]);
  return out + "]";
}

int fail(const std::string& message) {
  std::cerr << "k8s_allocate_client: " << message << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: k8s_allocate_client DIR GPU_INDEX COUNT\n";
    return 2;
  }
  const std::string dir = argv[1];
  const int gpu_index = std::atoi(argv[2]);
  const int count = std::atoi(argv[3]);

  k8s_test::FakeKubelet kubelet(dir + "/kubelet.sock");
  if (!kubelet.start()) return fail("cannot serve " + dir + "/kubelet.sock");
  std::cout << "kubelet ready" << std::endl;
  const auto registrations = kubelet.wait_for(1, 30s);
  if (registrations.empty()) return fail("the plugin did not register within 30 s");
  const v1beta1::RegisterRequest& registration = registrations.front();

  const auto stub = v1beta1::DevicePlugin::NewStub(
      grpc::CreateChannel("unix://" + dir + "/" + registration.endpoint(), grpc::InsecureChannelCredentials()));
  std::vector<std::string> devices;
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + 10s);
    auto reader = stub->ListAndWatch(&context, v1beta1::Empty());
    v1beta1::ListAndWatchResponse list_response;
    if (!reader->Read(&list_response)) return fail("ListAndWatch sent nothing");
    for (const v1beta1::Device& d : list_response.devices())
      if (d.health() == "Healthy") devices.push_back(d.id());
    context.TryCancel();
  }
  // Slice IDs are "<GPU UUID>::<k>": the GPUs in the order of their first slice in the list.
  std::vector<std::string> gpus;
  for (const std::string& id : devices) {
    const std::string gpu = id.substr(0, id.find("::"));
    if (std::find(gpus.begin(), gpus.end(), gpu) == gpus.end()) gpus.push_back(gpu);
  }
  if (gpu_index < 0 || static_cast<std::size_t>(gpu_index) >= gpus.size())
    return fail("no GPU " + std::to_string(gpu_index) + " among the plugin's " + std::to_string(gpus.size()));
  std::vector<std::string> chosen;
  for (const std::string& id : devices)
    if (id.starts_with(gpus[static_cast<std::size_t>(gpu_index)] + "::") && static_cast<int>(chosen.size()) < count)
      chosen.push_back(id);
  if (static_cast<int>(chosen.size()) != count) return fail("GPU " + std::to_string(gpu_index) + " has too few slices");

  v1beta1::AllocateRequest request;
  auto* container = request.add_container_requests();
  for (const std::string& id : chosen) container->add_devices_ids(id);
  v1beta1::AllocateResponse response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 10s);
  const grpc::Status status = stub->Allocate(&context, request, &response);
  if (!status.ok()) return fail("Allocate failed: " + status.error_message());
  if (response.container_responses_size() != 1)
    return fail("Allocate answered " + std::to_string(response.container_responses_size()) + " containers, not 1");
  const v1beta1::ContainerAllocateResponse& r = response.container_responses(0);

  std::ostringstream out;
  out << "{\"registration\": {\"version\": " << quoted(registration.version())
      << ", \"endpoint\": " << quoted(registration.endpoint())
      << ", \"resource_name\": " << quoted(registration.resource_name()) << "}, \"devices\": " << list(devices)
      << ", \"allocated\": " << list(chosen) << ", \"response\": {\"envs\": " << object(r.envs()) << ", \"mounts\": [";
  for (int i = 0; i < r.mounts_size(); ++i) {
    const v1beta1::Mount& m = r.mounts(i);
    out << (i ? ", " : "") << "{\"host_path\": " << quoted(m.host_path())
        << ", \"container_path\": " << quoted(m.container_path())
        << ", \"read_only\": " << (m.read_only() ? "true" : "false") << "}";
  }
  out << "], \"devices\": [";
  for (int i = 0; i < r.devices_size(); ++i) {
    const v1beta1::DeviceSpec& d = r.devices(i);
    out << (i ? ", " : "") << "{\"host_path\": " << quoted(d.host_path())
        << ", \"container_path\": " << quoted(d.container_path()) << ", \"permissions\": " << quoted(d.permissions())
        << "}";
  }
  std::vector<std::string> cdi;
  for (const auto& d : r.cdi_devices()) cdi.push_back(d.name());
  out << "], \"annotations\": " << object(r.annotations()) << ", \"cdi_devices\": " << list(cdi) << "}}";
  std::cout << out.str() << std::endl;
  kubelet.stop();
  return 0;
}
