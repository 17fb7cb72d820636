// libFuzzer harness for the configuration: arbitrary bytes as the value of every SLICE_* variable
// and as whole environments. Beyond "no crash, no sanitizer report", it checks what the rest of
// libslice relies on: a result is a complete Config within its ranges or one printable error line
// whose example is itself valid, and the quantity parsers agree with each other.
//
// Input: byte 0 chooses, the rest is the text.
//   0 .. N-1     the value of table row (byte 0), e.g. SLICE_MEMORY_LIMIT
//   N .. 2N-1    the value of that row's NAME_3 (a per-device form, or an error where there is none)
//   2N ..        an environment block, one NAME=VALUE per line; when byte 0 is odd, each line is
//                prefixed with SLICE_ so that most names are ours
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "config.h"
#include "quantity.h"
#include "variables.h"

namespace {

#define FUZZ_CHECK(condition)                                                            \
  do {                                                                                   \
    if (!(condition)) {                                                                  \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #condition); \
      std::abort();                                                                      \
    }                                                                                    \
  } while (0)

constexpr std::size_t kRows = std::size(slice::kSliceVariables);

void check_limit(const slice::MemoryLimit& limit) {
  if (limit.form == slice::MemoryLimit::Form::bytes) {
    FUZZ_CHECK(limit.bytes > 0 && limit.device_billionths == 0);
  } else {
    FUZZ_CHECK(limit.bytes == 0 && limit.device_billionths >= 1 &&
               limit.device_billionths <= slice::MemoryLimit::kWholeDevice);
    constexpr std::uint64_t kDevice = 24ull << 30;
    FUZZ_CHECK(limit.bytes_on(kDevice) <= kDevice);
    FUZZ_CHECK((limit.bytes_on(kDevice) == kDevice) == (limit.device_billionths == slice::MemoryLimit::kWholeDevice));
  }
}

void check_config(const slice::Config& config) {
  if (config.memory_limit.every_device) check_limit(*config.memory_limit.every_device);
  for (const auto& [device, limit] : config.memory_limit.by_device) {
    FUZZ_CHECK(device >= 0 && device <= slice::kMaxDeviceOrdinal);
    check_limit(limit);
  }
  FUZZ_CHECK(config.compute_share.every_device >= 1 && config.compute_share.every_device <= 100);
  for (const auto& [device, share] : config.compute_share.by_device) FUZZ_CHECK(share >= 1 && share <= 100);
  FUZZ_CHECK(config.compute_limit >= 1 && config.compute_limit <= 100);
  FUZZ_CHECK(config.tenant.size() <= slice::kMaxTenantNameLength);
  FUZZ_CHECK(!config.coordinator_dir.empty() && config.coordinator_dir.front() == '/');
}

void check_result(const slice::ConfigResult& result) {
  if (result) {
    check_config(*result.config);
    return;
  }
  const std::string line = result.error.message();
  for (const char c : line) FUZZ_CHECK(static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7f);
  FUZZ_CHECK(!result.error.reason.empty());
  // The example the error offers must itself be accepted.
  const auto equals = result.error.example.find('=');
  FUZZ_CHECK(equals != std::string::npos);
  const slice::Environment fixed{{result.error.example.substr(0, equals), result.error.example.substr(equals + 1)}};
  FUZZ_CHECK(static_cast<bool>(slice::parse_config(fixed)));
}

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (const char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// The parsers of one text must agree: plain digits mean what strtoull says they mean, a cap in
// bytes is the byte quantity, and a percent is 1..100.
void check_parsers(const std::string& text) {
  const auto bytes = slice::parse_byte_quantity(text);
  if (all_digits(text)) {
    errno = 0;
    const unsigned long long expected = std::strtoull(text.c_str(), nullptr, 10);
    FUZZ_CHECK(static_cast<bool>(bytes) == (errno != ERANGE));
    if (bytes) FUZZ_CHECK(*bytes.value == expected);
  }
  const auto limit = slice::parse_memory_limit(text);
  if (limit) {
    check_limit(*limit.value);
    if (limit.value->form == slice::MemoryLimit::Form::bytes) FUZZ_CHECK(bytes && *bytes.value == limit.value->bytes);
  } else {
    FUZZ_CHECK(!limit.reason.empty());
  }
  const auto percent = slice::parse_percent(text);
  if (percent) FUZZ_CHECK(*percent.value >= 1 && *percent.value <= 100);
}

void fuzz_environment(std::string_view block, bool prefix) {
  std::vector<std::string> entries;
  while (!block.empty()) {
    const std::size_t end = block.find('\n');
    const std::string_view line = block.substr(0, end);
    // An environment entry is a C string: it ends at the first NUL.
    entries.push_back((prefix ? "SLICE_" : "") + std::string(line.substr(0, line.find('\0'))));
    block = end == std::string_view::npos ? std::string_view{} : block.substr(end + 1);
  }
  std::vector<const char*> envp;
  for (const std::string& entry : entries) envp.push_back(entry.c_str());
  envp.push_back(nullptr);
  check_result(slice::parse_config(slice::slice_environment(envp.data())));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::size_t selector = data[0];
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (selector < 2 * kRows) {
    std::string name(slice::kSliceVariables[selector % kRows].name);
    if (selector >= kRows) name += "_3";
    check_result(slice::parse_config(slice::Environment{{name, text}}));
    check_parsers(text);
  } else {
    fuzz_environment(text, selector % 2 == 1);
  }
  return 0;
}
