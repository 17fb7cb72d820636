// slicectl metrics [--listen ADDR:PORT]: the coordinator's figures in Prometheus text format, once
// on standard output, or served at /metrics for a Prometheus scrape (read afresh for each one).
#include <unistd.h>

#include <cstdio>

#include "cli.h"
#include "commands.h"
#include "http_listener.h"
#include "listen_address.h"
#include "metrics_families.h"
#include "metrics_format.h"
#include "status_model.h"

namespace slicectl {

namespace {

HttpResponse scrape(const HttpRequest& request, const CommonOptions& common) {
  HttpResponse r;
  if (request.path() != "/metrics") {
    r.status = 404;
    r.body = "not found: the metrics are at /metrics\n";
  } else if (request.method != "GET" && request.method != "HEAD") {
    r.status = 405;
    r.body = "only GET and HEAD are served\n";
    r.headers.emplace_back("Allow", "GET, HEAD");
  } else {
    try {
      r.body = metrics_text(read_status(common.coordinator, common.policy_dir));
      r.content_type = kExpositionContentType;
    } catch (const CommandError& e) {
      // A coordinator that cannot be read (none at all is an idle machine, with the GPUs' series
      // and no tenant's): Prometheus marks the target down and says why.
      r.status = 503;
      r.body = e.message + "\n";
    }
  }
  return r;
}

int serve(const std::string& listen, const CommonOptions& common) {
  // Watched before the address is printed: whoever reads it may send SIGTERM at once.
  SignalWatch signals({SIGINT, SIGTERM});
  std::string bound;
  const int fd = open_listener("--listen", parse_listen_address("--listen", listen), bound);
  std::printf("listening on http://%s/metrics\n", bound.c_str());
  std::fflush(stdout);
  try {
    read_status(common.coordinator, common.policy_dir);
  } catch (const CommandError& e) {  // it may be repaired later: each scrape reads afresh
    std::fprintf(stderr, "slicectl metrics: %s; answering 503 while it cannot be read\n", e.message.c_str());
  }
  serve_http(fd, signals, [&](const HttpRequest& r) { return scrape(r, common); });
  close(fd);
  return kExitOk;
}

}  // namespace

int run_metrics(std::vector<std::string> argv) {
  ArgReader args(std::move(argv));
  CommonOptions common;
  std::string listen;
  bool listening = false;
  while (!args.done()) {
    if (args.option("--listen", listen))
      listening = true;
    else if (!common.read(args))
      unknown_option(args.peek());
  }
  if (listening) return serve(listen, common);
  std::fputs(metrics_text(read_status(common.coordinator, common.policy_dir)).c_str(), stdout);
  return kExitOk;
}

}  // namespace slicectl
