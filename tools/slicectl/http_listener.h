// A small HTTP/1.1 server for slicectl metrics --listen: one request per connection, answered and
// closed. One thread polls every connection, so a client that is slow or never sends delays no
// one else, and is dropped after kConnectionTimeout.
#pragma once

#include <functional>

#include "http_message.h"
#include "signal_watch.h"

namespace slicectl {

using HttpHandler = std::function<HttpResponse(const HttpRequest&)>;

// Serves the connections made to `listen_fd` (listening, non-blocking) until SIGINT or SIGTERM
// comes through `signals` (which must watch both). Answers 400 to a malformed request and 431 to
// one whose head is too large; the handler answers the rest.
void serve_http(int listen_fd, SignalWatch& signals, const HttpHandler& handler);

}  // namespace slicectl
