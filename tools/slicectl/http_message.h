// The little of HTTP/1.1 that a Prometheus scrape needs: the request line of a request head, and
// a whole response with Content-Length, after which the connection closes.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace slicectl {

struct HttpRequest {
  std::string method;  // "GET"
  std::string target;  // "/metrics?x=1"
  std::string path() const { return target.substr(0, target.find('?')); }
};

enum class RequestHead { incomplete, complete, malformed, too_large };

// Largest request head read; a scrape's is a few hundred bytes.
inline constexpr std::size_t kMaxRequestHead = 8192;

// Whether `received` (the bytes read so far) holds a whole request head (up to the empty line),
// and if so its request line in `request`. Headers are not needed and not looked at.
RequestHead parse_request_head(std::string_view received, HttpRequest& request);

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // more, such as Allow
};

// The response as sent; without the body for a HEAD request (Content-Length stays the body's).
std::string response_text(const HttpResponse& response, bool head_only);

}  // namespace slicectl
