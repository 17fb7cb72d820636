#include "listen_address.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "cli.h"

namespace slicectl {

namespace {

constexpr const char* kLocalHost = "127.0.0.1";
constexpr const char* kExample = "127.0.0.1:9400";

bool valid_port(std::string_view port) {
  if (port.empty() || port.size() > 5) return false;
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) return false;
  return std::stoul(std::string(port)) <= 65535;
}

std::string address_text(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof host);
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(v6.sin6_port));
  }
  const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
  inet_ntop(AF_INET, &v4.sin_addr, host, sizeof host);
  return std::string(host) + ":" + std::to_string(ntohs(v4.sin_port));
}

}  // namespace

ListenAddress parse_listen_address(std::string_view option, std::string_view text) {
  const auto bad = [&](std::string_view why) { invalid_option(option, text, why, kExample); };
  ListenAddress a;
  if (text.empty()) bad("it is empty");
  if (text.find_first_not_of("0123456789") == std::string_view::npos) {
    a.host = kLocalHost;
    a.port = text;
  } else if (text.front() == '[') {
    const auto close = text.find("]:");
    if (close == std::string_view::npos) bad("expected [IPv6]:PORT");
    a.host = text.substr(1, close - 1);
    a.port = text.substr(close + 2);
  } else {
    const auto colon = text.rfind(':');
    if (colon == std::string_view::npos) bad("expected ADDR:PORT, :PORT or PORT");
    a.host = text.substr(0, colon);
    a.port = text.substr(colon + 1);
    if (a.host.find(':') != std::string::npos) bad("an IPv6 address goes in brackets: [::1]:PORT");
    if (a.host.empty()) a.host = kLocalHost;
  }
  if (a.host.empty()) bad("no address");
  if (!valid_port(a.port)) bad("the port must be a number from 0 to 65535");
  return a;
}

int open_listener(std::string_view option, const ListenAddress& address, std::string& bound) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const int lookup = getaddrinfo(address.host.c_str(), address.port.c_str(), &hints, &found);
  const std::string shown_address = shown(address.host, 200) + ":" + address.port;
  if (lookup == EAI_AGAIN || lookup == EAI_SYSTEM || lookup == EAI_MEMORY)
    fail("cannot resolve " + shown_address + ": " + gai_strerror(lookup));
  if (lookup != 0) invalid_option(option, shown_address, gai_strerror(lookup), kExample);

  int first_error = 0;
  for (const addrinfo* ai = found; ai; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      if (!first_error) first_error = errno;
      continue;
    }
    // A restart may bind again while the last run's connections linger in TIME_WAIT; a port that
    // something listens on still refuses.
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 64) == 0) {
      sockaddr_storage local{};
      socklen_t length = sizeof local;
      getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length);
      bound = address_text(local);
      freeaddrinfo(found);
      return fd;
    }
    if (!first_error) first_error = errno;
    close(fd);
  }
  freeaddrinfo(found);
  if (first_error == EADDRINUSE) fail("cannot listen on " + shown_address + ": the port is in use");
  fail("cannot listen on " + shown_address + ": " + std::strerror(first_error));
}

}  // namespace slicectl
