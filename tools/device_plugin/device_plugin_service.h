// The DevicePlugin service the kubelet calls on the plugin's socket.
#pragma once

#include <atomic>

#include "deviceplugin_v1beta1.grpc.pb.h"
#include "plugin_options.h"
#include "slice_health.h"
#include "slice_inventory.h"

namespace slice::k8s {

class DevicePluginService final : public v1beta1::DevicePlugin::Service {
 public:
  DevicePluginService(const PluginOptions& options, const Inventory& inventory, SliceHealth& health,
                      const std::atomic<bool>& stopping)
      : options_(options), inventory_(inventory), health_(health), stopping_(stopping) {}

  grpc::Status GetDevicePluginOptions(grpc::ServerContext* context, const v1beta1::Empty* request,
                                      v1beta1::DevicePluginOptions* response) override;
  // The full list at once, then again at every health change, until the kubelet hangs up or the
  // plugin stops.
  grpc::Status ListAndWatch(grpc::ServerContext* context, const v1beta1::Empty* request,
                            grpc::ServerWriter<v1beta1::ListAndWatchResponse>* writer) override;
  grpc::Status GetPreferredAllocation(grpc::ServerContext* context, const v1beta1::PreferredAllocationRequest* request,
                                      v1beta1::PreferredAllocationResponse* response) override;
  grpc::Status Allocate(grpc::ServerContext* context, const v1beta1::AllocateRequest* request,
                        v1beta1::AllocateResponse* response) override;
  grpc::Status PreStartContainer(grpc::ServerContext* context, const v1beta1::PreStartContainerRequest* request,
                                 v1beta1::PreStartContainerResponse* response) override;

 private:
  grpc::Status allocate_container(const v1beta1::ContainerAllocateRequest& request,
                                  v1beta1::ContainerAllocateResponse& response);

  const PluginOptions& options_;
  const Inventory& inventory_;
  SliceHealth& health_;
  const std::atomic<bool>& stopping_;
};

// Options the plugin registers with (and answers GetDevicePluginOptions with).
v1beta1::DevicePluginOptions plugin_options_message();

}  // namespace slice::k8s
