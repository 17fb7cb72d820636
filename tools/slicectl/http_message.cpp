#include "http_message.h"

#include <algorithm>

namespace slicectl {

namespace {

bool is_token(std::string_view s) {
  // RFC 9110 tchar.
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
  });
}

bool is_target(std::string_view s) {
  return !s.empty() && s.front() == '/' && std::all_of(s.begin(), s.end(), [](char c) { return c > 0x20 && c < 0x7f; });
}

std::string_view reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Internal Server Error";
  }
}

}  // namespace

RequestHead parse_request_head(std::string_view received, HttpRequest& request) {
  // The head ends at an empty line; bare LF line ends are tolerated (RFC 9112 2.2).
  std::size_t end = received.find("\r\n\r\n");
  if (end == std::string_view::npos) end = received.find("\n\n");
  if (end == std::string_view::npos)
    return received.size() > kMaxRequestHead ? RequestHead::too_large : RequestHead::incomplete;
  if (end > kMaxRequestHead) return RequestHead::too_large;
  std::string_view line = received.substr(0, received.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  const auto first = line.find(' '), second = line.rfind(' ');
  if (first == std::string_view::npos || first == second) return RequestHead::malformed;
  const std::string_view method = line.substr(0, first), target = line.substr(first + 1, second - first - 1),
                         version = line.substr(second + 1);
  if (!is_token(method) || !is_target(target) || version.substr(0, 7) != "HTTP/1." || version.size() != 8)
    return RequestHead::malformed;
  request.method = method;
  request.target = target;
  return RequestHead::complete;
}

std::string response_text(const HttpResponse& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + std::string(reason(r.status)) + "\r\n";
  out += "Content-Type: " + r.content_type + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  for (const auto& [name, value] : r.headers) out += name + ": " + value + "\r\n";
  out += "Connection: close\r\n\r\n";
  if (!head_only) out += r.body;
  return out;
}

}  // namespace slicectl
