#include "device_plugin_service.h"

#include <spdlog/spdlog.h>

#include "allocation_policy.h"
#include "container_edits.h"
#include "policy.h"

namespace slice::k8s {
namespace {
constexpr auto kStreamPoll = std::chrono::milliseconds(250);  // how soon a stream notices a stop
}  // namespace

v1beta1::DevicePluginOptions plugin_options_message() {
  v1beta1::DevicePluginOptions o;
  o.set_pre_start_required(false);
  o.set_get_preferred_allocation_available(true);
  return o;
}

grpc::Status DevicePluginService::GetDevicePluginOptions(grpc::ServerContext*, const v1beta1::Empty*,
                                                         v1beta1::DevicePluginOptions* response) {
  *response = plugin_options_message();
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty*,
                                               grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) {
  std::uint64_t sent = 0;
  while (!stopping_.load() && !context->IsCancelled()) {
    std::uint64_t version = 0;
    const std::vector<SliceState> slices = health_.slices(&version);
    if (version != sent) {
      v1beta1::ListAndWatchResponse response;
      for (const SliceState& s : slices) {
        v1beta1::Device* d = response.add_devices();
        d->set_id(s.id);
        d->set_health(s.healthy ? "Healthy" : "Unhealthy");
      }
      if (!writer->Write(response)) break;  // the kubelet hung up
      spdlog::debug("ListAndWatch: sent {} slices (version {})", slices.size(), version);
      sent = version;
    }
    health_.wait_for_change(sent, kStreamPoll);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::GetPreferredAllocation(grpc::ServerContext*,
                                                         const v1beta1::PreferredAllocationRequest* request,
                                                         v1beta1::PreferredAllocationResponse* response) {
  for (const auto& container : request->container_requests()) {
    const std::vector<std::string> available(container.available_deviceids().begin(),
                                             container.available_deviceids().end());
    const std::vector<std::string> must(container.must_include_deviceids().begin(),
                                        container.must_include_deviceids().end());
    const std::size_t size =
        container.allocation_size() > 0 ? static_cast<std::size_t>(container.allocation_size()) : 0;
    auto* out = response->add_container_responses();
    for (const std::string& id : preferred_allocation(inventory_, available, must, size)) out->add_deviceids(id);
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::allocate_container(const v1beta1::ContainerAllocateRequest& request,
                                                     v1beta1::ContainerAllocateResponse& response) {
  const std::vector<std::string> ids(request.devices_ids().begin(), request.devices_ids().end());
  std::map<std::string, unsigned> by_gpu;
  std::string error;
  if (ids.empty()) return {grpc::StatusCode::INVALID_ARGUMENT, "no slices asked for"};
  if (!slices_by_gpu(inventory_, ids, by_gpu, error)) return {grpc::StatusCode::INVALID_ARGUMENT, error};
  if (options_.single_gpu_only && by_gpu.size() > 1)
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "the slices lie on " + std::to_string(by_gpu.size()) +
                " GPUs and this plugin runs with --single-gpu-only: ask for at most " +
                std::to_string(options_.layout.slices_per_gpu) + " slices per container"};

  const std::string tenant = tenant_for_slices(ids);
  const ContainerEdits edits = container_edits(inventory_, by_gpu, options_.paths, tenant);
  // The owner's word: a root-owned policy for the tenant, which wins over anything in the
  // container's environment, and a root-owned tenant file, which its processes cannot delete to
  // start again from zero.
  // A file of that name another user made before (the names are predictable) is replaced.
  std::string notice;
  if (!write_policy(options_.paths.host_policy_dir, tenant, edits.policy, error) ||
      !adopt_tenant_file(options_.paths.host_coordinator_dir, tenant, options_.tenant_group, error, &notice))
    return {grpc::StatusCode::INTERNAL, "cannot write the policy of tenant '" + tenant + "': " + error};
  if (!notice.empty()) spdlog::warn("{}", notice);

  for (const auto& [name, value] : edits.env) {
    if (name == "NVIDIA_VISIBLE_DEVICES" && options_.device_list == DeviceListStrategy::cdi) continue;
    (*response.mutable_envs())[name] = value;
  }
  if (options_.device_list == DeviceListStrategy::cdi)
    for (const std::string& uuid : edits.gpu_uuids)
      response.add_cdi_devices()->set_name(options_.cdi_kind + "=" + uuid);
  for (const MountEdit& m : edits.mounts) {
    v1beta1::Mount* mount = response.add_mounts();
    mount->set_host_path(m.host_path);
    mount->set_container_path(m.container_path);
    mount->set_read_only(m.read_only);
  }
  std::string summary;
  for (const auto& [uuid, count] : by_gpu) summary += " " + std::to_string(count) + " on " + uuid + ";";
  spdlog::info("Allocate: tenant '{}':{} policy written", tenant, summary);
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::Allocate(grpc::ServerContext*, const v1beta1::AllocateRequest* request,
                                           v1beta1::AllocateResponse* response) {
  for (const auto& container : request->container_requests()) {
    grpc::Status status = allocate_container(container, *response->add_container_responses());
    if (!status.ok()) {
      spdlog::warn("Allocate refused: {}", status.error_message());
      return status;
    }
  }
  return grpc::Status::OK;
}

grpc::Status DevicePluginService::PreStartContainer(grpc::ServerContext*, const v1beta1::PreStartContainerRequest*,
                                                    v1beta1::PreStartContainerResponse*) {
  return grpc::Status::OK;  // not asked for (pre_start_required is false)
}

}  // namespace slice::k8s
