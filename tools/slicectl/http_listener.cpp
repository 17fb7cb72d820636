#include "http_listener.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
#include <string>
#include <vector>

#include "cli.h"

namespace slicectl {

namespace {

using Clock = std::chrono::steady_clock;

// How long a connection may take from accept to the last byte of the answer: short, so that the
// 64 connections served at once cannot be held by idle clients for long (Prometheus scrapes on
// the same host or network answer in milliseconds).
constexpr auto kConnectionTimeout = std::chrono::seconds(3);
// Connections served at once; more wait in the listen backlog.
constexpr std::size_t kMaxConnections = 64;
// How long accepting pauses after accept() failed for want of file descriptors.
constexpr auto kAcceptPause = std::chrono::seconds(1);

struct Connection {
  int fd = -1;
  Clock::time_point deadline;
  std::string received;
  std::string reply;  // empty until the request is read
  std::size_t sent = 0;
  bool done = false;  // answered, dropped or timed out: close it
};

HttpResponse plain_error(int status, std::string text) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(text) + "\n";
  return r;
}

void read_request(Connection& c, const HttpHandler& handler) {
  char buf[4096];
  const ssize_t n = recv(c.fd, buf, sizeof buf, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {  // closed, or reset, before a whole request came
    c.done = true;
    return;
  }
  c.received.append(buf, static_cast<std::size_t>(n));
  HttpRequest request;
  switch (parse_request_head(c.received, request)) {
    case RequestHead::incomplete:
      return;
    case RequestHead::malformed:
      c.reply = response_text(plain_error(400, "malformed request"), false);
      return;
    case RequestHead::too_large:
      c.reply = response_text(plain_error(431, "request head too large"), false);
      return;
    case RequestHead::complete:
      c.reply = response_text(handler(request), request.method == "HEAD");
      return;
  }
}

void send_reply(Connection& c) {
  const ssize_t n = send(c.fd, c.reply.data() + c.sent, c.reply.size() - c.sent, MSG_NOSIGNAL);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) {
    c.done = true;
    return;
  }
  c.sent += static_cast<std::size_t>(n);
  if (c.sent < c.reply.size()) return;
  shutdown(c.fd, SHUT_WR);
  c.done = true;
}

int milliseconds_until(Clock::time_point when, Clock::time_point now) {
  if (when <= now) return 0;
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(when - now).count());
}

}  // namespace

void serve_http(int listen_fd, SignalWatch& signals, const HttpHandler& handler) {
  std::list<Connection> connections;
  Clock::time_point accept_again{};  // accepting paused until then
  std::vector<pollfd> fds;
  while (true) {
    // Both taken each time round: either stops.
    const bool interrupted = signals.take(SIGINT), terminated = signals.take(SIGTERM);
    if (interrupted || terminated) break;
    const Clock::time_point now = Clock::now();
    fds.clear();
    const bool accepting = connections.size() < kMaxConnections && now >= accept_again;
    if (accepting) fds.push_back({listen_fd, POLLIN, 0});
    int timeout = accepting ? -1 : milliseconds_until(accept_again, now);
    if (connections.size() >= kMaxConnections) timeout = -1;
    for (const Connection& c : connections) {
      fds.push_back({c.fd, static_cast<short>(c.reply.empty() ? POLLIN : POLLOUT), 0});
      const int left = milliseconds_until(c.deadline, now);
      timeout = timeout < 0 ? left : std::min(timeout, left);
    }
    if (signals.wait(fds.data(), fds.size(), timeout) < 0) {
      if (errno == EINTR) continue;
      fail(std::string("waiting for connections: ") + std::strerror(errno));
    }
    std::size_t i = 0;
    if (accepting) {
      if (fds[i++].revents & POLLIN) {
        for (std::size_t n = connections.size(); n < kMaxConnections; ++n) {
          const int fd = accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
          if (fd >= 0) {
            connections.push_back({fd, Clock::now() + kConnectionTimeout, {}, {}, 0, false});
            continue;
          }
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            std::fprintf(stderr, "slicectl metrics: cannot accept a connection now: %s\n", std::strerror(errno));
            accept_again = Clock::now() + kAcceptPause;
          }
          break;  // EAGAIN: no more waiting; ECONNABORTED and the like: gone already
        }
      }
    }
    const Clock::time_point after = Clock::now();
    for (Connection& c : connections) {
      if (i >= fds.size() || fds[i].fd != c.fd) break;  // accepted just now: polled next time
      const short events = fds[i++].revents;
      if (events & (POLLIN | POLLHUP | POLLERR)) {
        if (c.reply.empty())
          read_request(c, handler);
        else
          c.done = true;  // the peer went away while we were writing
      }
      if (!c.done && !c.reply.empty()) send_reply(c);  // EAGAIN: when POLLOUT says so
      if (after >= c.deadline) c.done = true;
    }
    for (auto it = connections.begin(); it != connections.end();) {
      if (!it->done) {
        ++it;
        continue;
      }
      close(it->fd);
      it = connections.erase(it);
    }
  }
  for (const Connection& c : connections) close(c.fd);
}

}  // namespace slicectl
