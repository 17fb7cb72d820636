#include "visible_devices.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace simgpu {
namespace {

std::string trimmed(const std::string& s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

// A whole UUID without its "GPU-" prefix (8-4-4-4-12 hex digits): a UUID even where it starts with
// a digit. Anything else that starts with a digit is an ordinal.
bool is_bare_uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash ? s[i] != '-' : !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The device an entry names, as a position in `ordered`; -1 when it names none.
int entry_device(const std::string& raw, const std::vector<int>& ordered, const std::vector<PhysicalDevice>& devices) {
  std::string e = trimmed(raw);
  if (e.empty()) return -1;
  std::size_t at = e[0] == '+' ? 1 : 0;
  if (at < e.size() && std::isdigit(static_cast<unsigned char>(e[at])) && !is_bare_uuid(e)) {
    unsigned long long n = 0;
    while (at < e.size() && std::isdigit(static_cast<unsigned char>(e[at])) && n < 1000) n = n * 10 + (e[at++] - '0');
    return n < ordered.size() ? ordered[n] : -1;
  }
  // A UUID, or a prefix of one, with or without "GPU-".
  std::string want = lower(e);
  if (want.rfind("mig-", 0) == 0) return -1;  // no MIG devices here
  if (want.rfind("gpu-", 0) != 0) want = "gpu-" + want;
  int found = -1;
  for (std::size_t d = 0; d < devices.size(); ++d) {
    if (lower(devices[d].uuid).rfind(want, 0) != 0) continue;
    if (found >= 0) return -1;  // ambiguous
    found = static_cast<int>(d);
  }
  return found;
}

}  // namespace

std::vector<int> visible_devices(const std::vector<PhysicalDevice>& devices, const char* visible, const char* order) {
  std::vector<int> ordered(devices.size());
  for (std::size_t d = 0; d < devices.size(); ++d) ordered[d] = static_cast<int>(d);
  const bool pci_order = order != nullptr && std::strcmp(order, "PCI_BUS_ID") == 0;
  std::stable_sort(ordered.begin(), ordered.end(), [&](int a, int b) {
    if (!pci_order && devices[a].sm_count != devices[b].sm_count) return devices[a].sm_count > devices[b].sm_count;
    return devices[a].pci_bus < devices[b].pci_bus;
  });
  if (visible == nullptr) return ordered;
  std::vector<int> seen;
  const std::string list = visible;
  for (std::size_t pos = 0; !list.empty() && pos <= list.size();) {
    const std::size_t comma = list.find(',', pos);
    const int d =
        entry_device(list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos), ordered, devices);
    if (d < 0) break;  // the list ends at the first entry that names no device
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) return {};  // named twice: none
    seen.push_back(d);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return seen;
}

}  // namespace simgpu
