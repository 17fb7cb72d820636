// The pieces of slicectl metrics that no coordinator can exercise from outside: label values that
// need escaping (tenant names cannot hold any such character, but the writer must not rely on
// it), exact integers past 2^53, and the HTTP request heads a scrape (or a stray client) sends.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "http_message.h"
#include "metrics_format.h"

namespace {

using slicectl::Exposition;
using slicectl::HttpRequest;
using slicectl::RequestHead;
using slicectl::SampleValue;

TEST(MetricsFormat, LabelValuesAndHelpAreEscaped) {
  EXPECT_EQ(slicectl::escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
  EXPECT_EQ(slicectl::escape_label_value("plain é"), "plain é");                  // UTF-8 passes as it is
  EXPECT_EQ(slicectl::escape_help("say \"x\" \\ y\nz"), "say \"x\" \\\\ y\\nz");  // quotes stay in HELP

  Exposition e;
  e.family("m_bytes", "gauge", "Bytes.\nMore.");
  e.sample("m_bytes", {{"tenant", "q\"t"}, {"device", "0"}}, SampleValue::of(std::uint64_t{7}));
  e.sample("m_bytes", {}, SampleValue::of(std::uint64_t{8}));
  EXPECT_EQ(e.text(),
            "# HELP m_bytes Bytes.\\nMore.\n"
            "# TYPE m_bytes gauge\n"
            "m_bytes{tenant=\"q\\\"t\",device=\"0\"} 7\n"
            "m_bytes 8\n");
}

TEST(MetricsFormat, ValuesAreExactAndLocaleFree) {
  Exposition e;
  e.family("v", "gauge", "h");
  e.sample("v", {}, SampleValue::of(~std::uint64_t{0}));  // not 1.8446744073709552e+19
  e.sample("v", {}, SampleValue::of(0.237));
  e.sample("v", {}, SampleValue::of(1.0));
  e.sample("v", {}, SampleValue::of(0.1 + 0.2));  // the shortest text that reads back the same
  EXPECT_EQ(e.text(), "# HELP v h\n# TYPE v gauge\nv 18446744073709551615\nv 0.237\nv 1\nv 0.30000000000000004\n");
}

TEST(HttpMessage, RequestHeads) {
  HttpRequest r;
  EXPECT_EQ(slicectl::parse_request_head("GET /metrics HTTP/1.1\r\nHost: x\r\n", r), RequestHead::incomplete);
  ASSERT_EQ(slicectl::parse_request_head("GET /metrics?a=b HTTP/1.1\r\nHost: x\r\n\r\n", r), RequestHead::complete);
  EXPECT_EQ(r.method, "GET");
  EXPECT_EQ(r.target, "/metrics?a=b");
  EXPECT_EQ(r.path(), "/metrics");
  EXPECT_EQ(slicectl::parse_request_head("HEAD / HTTP/1.0\n\n", r), RequestHead::complete);  // bare LF
  EXPECT_EQ(r.method, "HEAD");
  for (const char* bad : {"nonsense\r\n\r\n", "GET /metrics\r\n\r\n", "GET metrics HTTP/1.1\r\n\r\n",
                          "GET /metrics HTTP/2\r\n\r\n", "G(T /metrics HTTP/1.1\r\n\r\n", "GET /a b HTTP/1.1\r\n\r\n"})
    EXPECT_EQ(slicectl::parse_request_head(bad, r), RequestHead::malformed) << bad;
  const std::string endless = "GET /metrics HTTP/1.1\r\nX: " + std::string(slicectl::kMaxRequestHead, 'x');
  EXPECT_EQ(slicectl::parse_request_head(endless, r), RequestHead::too_large);
}

TEST(HttpMessage, Responses) {
  slicectl::HttpResponse r;
  r.status = 405;
  r.body = "no\n";
  r.headers.emplace_back("Allow", "GET, HEAD");
  const std::string head =
      "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n"
      "Allow: GET, HEAD\r\nConnection: close\r\n\r\n";
  EXPECT_EQ(slicectl::response_text(r, false), head + "no\n");
  EXPECT_EQ(slicectl::response_text(r, true), head);  // HEAD: the length, not the body
}

}  // namespace
