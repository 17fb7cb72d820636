// A fake kubelet for the device plugin tests: the Registration service on kubelet.sock in a
// temporary device-plugin folder, recording every Register call.
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "deviceplugin_v1beta1.grpc.pb.h"

namespace k8s_test {

class FakeKubelet final : public v1beta1::Registration::Service {
 public:
  explicit FakeKubelet(std::string socket_path) : socket_path_(std::move(socket_path)) {}
  ~FakeKubelet() override { stop(); }

  grpc::Status Register(grpc::ServerContext*, const v1beta1::RegisterRequest* request, v1beta1::Empty*) override {
    std::lock_guard<std::mutex> lock(mu_);
    registrations_.push_back(*request);
    cv_.notify_all();
    return grpc::Status::OK;
  }

  bool start() {
    ::unlink(socket_path_.c_str());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix://" + socket_path_, grpc::InsecureServerCredentials());
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    return server_ != nullptr;
  }
  // As a kubelet that goes away: its socket is gone too.
  void stop() {
    if (!server_) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    server_.reset();
    ::unlink(socket_path_.c_str());
  }

  // Waits until at least `n` registrations have arrived; a copy of them.
  std::vector<v1beta1::RegisterRequest> wait_for(std::size_t n, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return registrations_.size() >= n; });
    return registrations_;
  }

 private:
  std::string socket_path_;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<v1beta1::RegisterRequest> registrations_;
};

}  // namespace k8s_test
