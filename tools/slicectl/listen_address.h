// Where slicectl metrics --listen serves: ADDR:PORT, [IPv6]:PORT, :PORT or PORT (127.0.0.1, so
// that nothing is exposed beyond the machine unless asked), parsed and bound.
#pragma once

#include <string>
#include <string_view>

namespace slicectl {

struct ListenAddress {
  std::string host;  // an address or a name getaddrinfo resolves
  std::string port;  // digits, 0 to 65535 (0: any free port)
};

// Exit 2 (invalid_option of `option`) when `text` is not one of the forms above.
ListenAddress parse_listen_address(std::string_view option, std::string_view text);

// A listening socket (non-blocking, close-on-exec) on `address`, and the address it got in
// `bound` ("127.0.0.1:43817", "[::1]:9400"). Exit 2 when the host cannot be resolved; exit 1
// when it cannot be bound (in use, not an address of this machine, a port below 1024 without root).
int open_listener(std::string_view option, const ListenAddress& address, std::string& bound);

}  // namespace slicectl
