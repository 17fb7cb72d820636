// For the tests of slicectl top and metrics: writes into a tenant's file what its processes'
// compute watchers would have, such that the share received over the last second and the last ten
// is exactly RECEIVED_NS / 1 s and RECEIVED_NS / 10 s for the next ten seconds, however late
// slicectl reads it: a history of zeros whose newest sample lies 10 s ahead (received_over then
// reads zero at the start of either window), and a cumulative total of RECEIVED_NS.
//
// usage: slicectl_compute_writer TENANT GPU-UUID RECEIVED_NS   (the coordinator: $SLICE_COORDINATOR_DIR)
#include <cstdio>
#include <cstdlib>
#include <string>

#include "policy.h"
#include "tenant_file.h"

int main(int argc, char** argv) {
  const char* dir = std::getenv("SLICE_COORDINATOR_DIR");
  if (argc != 4 || !dir) {
    std::fputs("usage: slicectl_compute_writer TENANT GPU-UUID RECEIVED_NS (with SLICE_COORDINATOR_DIR)\n", stderr);
    return 2;
  }
  std::string error;
  auto file = slice::TenantFileHandle::open(dir, argv[1], slice::TenantFileHandle::Mode::read_write, error);
  if (!file) {
    std::fprintf(stderr, "slicectl_compute_writer: %s\n", error.c_str());
    return 1;
  }
  const std::uint64_t received = std::stoull(argv[3]);
  const std::uint64_t newest = slice::monotonic_ns() / slice::kHistoryStepNs + 40;  // 10 s ahead
  for (int d = 0; d < slice::kMaxDevices; ++d) {
    slice::DeviceEntry& entry = file->file().devices[d];
    if (entry.state.load() != 2 || slice::uuid_text(entry.uuid) != argv[2]) continue;
    slice::ReceivedHistory& history = file->file().history[d];
    for (auto& total : history.total_ns) total.store(0);
    history.updated_ns.store(0);
    history.updated_total_ns.store(0);
    history.step.store(newest);
    entry.received_ns.store(received);
    return 0;
  }
  std::fprintf(stderr, "slicectl_compute_writer: tenant '%s' has no entry for %s\n", argv[1], argv[2]);
  return 1;
}
