#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/metrics_server.h"
#include "gtest/gtest.h"

namespace elastrun::metrics {
namespace {

// A small parser of the text format: what a scraper reads. Samples are
// keyed "name{a=\"x\",b=\"y\"}" with label values unescaped; HELP and TYPE
// lines land in `help` and `type`. A malformed line fails the test.
struct Parsed {
  std::map<std::string, double> samples;
  std::map<std::string, std::string> help;
  std::map<std::string, std::string> type;
};

Parsed Parse(const std::string& text) {
  Parsed p;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&line, "# HELP ")) {
      const size_t sp = line.find(' ');
      p.help[std::string(line.substr(0, sp))] = std::string(line.substr(sp + 1));
      continue;
    }
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      const size_t sp = line.find(' ');
      p.type[std::string(line.substr(0, sp))] = std::string(line.substr(sp + 1));
      continue;
    }
    std::string key;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') key += line[i++];
    if (i < line.size() && line[i] == '{') {
      key += '{';
      ++i;
      bool first = true;
      while (i < line.size() && line[i] != '}') {
        if (line[i] == ',') ++i;
        std::string name;
        while (i < line.size() && line[i] != '=') name += line[i++];
        EXPECT_EQ(line.substr(i, 2), "=\"") << line;
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\') {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
          ++i;
        }
        ++i;  // closing quote
        if (!first) key += ',';
        first = false;
        key += name + "=\"" + value + "\"";
      }
      key += '}';
      ++i;
    }
    EXPECT_EQ(line.substr(i, 1), " ") << line;
    const absl::string_view v = line.substr(i + 1);
    double value = 0;
    if (v == "+Inf") {
      value = INFINITY;
    } else {
      EXPECT_TRUE(absl::SimpleAtod(v, &value)) << line;
    }
    EXPECT_EQ(p.samples.count(key), 0u) << "duplicate series " << key;
    p.samples[key] = value;
  }
  return p;
}

TEST(MetricsTest, CountersGaugesAndLabelsRender) {
  Registry r;
  r.GetCounter("elastrun_rounds_total", "Rounds closed.").Increment(3);
  r.GetCounter("elastrun_restarts_total", "Restarts by cause.", {{"cause", "failure"}})
      .Increment();
  r.GetCounter("elastrun_restarts_total", "Restarts by cause.", {{"cause", "node_lost"}})
      .Increment(2);
  // The same series again: the same counter.
  r.GetCounter("elastrun_rounds_total", "Rounds closed.").Increment();
  Gauge& g = r.GetGauge("elastrun_running_workers", "Workers running.");
  g.Set(4);
  g.Add(-1.5);

  const Parsed p = Parse(r.Render());
  EXPECT_EQ(p.samples.at("elastrun_rounds_total"), 4);
  EXPECT_EQ(p.samples.at("elastrun_restarts_total{cause=\"failure\"}"), 1);
  EXPECT_EQ(p.samples.at("elastrun_restarts_total{cause=\"node_lost\"}"), 2);
  EXPECT_EQ(p.samples.at("elastrun_running_workers"), 2.5);
  EXPECT_EQ(p.type.at("elastrun_rounds_total"), "counter");
  EXPECT_EQ(p.type.at("elastrun_running_workers"), "gauge");
  EXPECT_EQ(p.help.at("elastrun_restarts_total"), "Restarts by cause.");
}

TEST(MetricsTest, EscapesHelpAndLabelValues) {
  Registry r;
  r.GetGauge("g", "line one\nback\\slash", {{"job", "a\"b\\c\nd"}}).Set(1);
  const std::string text = r.Render();
  EXPECT_TRUE(absl::StrContains(text, "# HELP g line one\\nback\\\\slash\n")) << text;
  EXPECT_TRUE(absl::StrContains(text, "g{job=\"a\\\"b\\\\c\\nd\"} 1\n")) << text;
  const Parsed p = Parse(text);
  EXPECT_EQ(p.samples.at("g{job=\"a\"b\\c\nd\"}"), 1);
}

TEST(MetricsTest, HistogramBucketsAreCumulativeAndInclusive) {
  Registry r;
  Histogram& h = r.GetHistogram("elastrun_rendezvous_seconds", "Round open to close.",
                                {0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 2.0, 100.0}) h.Observe(v);
  const Parsed p = Parse(r.Render());
  EXPECT_EQ(p.type.at("elastrun_rendezvous_seconds"), "histogram");
  EXPECT_EQ(p.samples.at("elastrun_rendezvous_seconds_bucket{le=\"0.10000000000000001\"}"),
            2);  // 0.05 and 0.1 (le is inclusive)
  EXPECT_EQ(p.samples.at("elastrun_rendezvous_seconds_bucket{le=\"1\"}"), 3);
  EXPECT_EQ(p.samples.at("elastrun_rendezvous_seconds_bucket{le=\"10\"}"), 4);
  EXPECT_EQ(p.samples.at("elastrun_rendezvous_seconds_bucket{le=\"+Inf\"}"), 5);
  EXPECT_EQ(p.samples.at("elastrun_rendezvous_seconds_count"), 5);
  EXPECT_DOUBLE_EQ(p.samples.at("elastrun_rendezvous_seconds_sum"), 102.65);
}

TEST(MetricsTest, CollectorsAddFamiliesAtRenderTime) {
  Registry r;
  int calls = 0;
  r.AddCollector([&calls] {
    ++calls;
    Family f{"elastrun_jobs", "Jobs by state.", "gauge", {}};
    f.samples.push_back({{{"state", "running"}}, static_cast<double>(calls)});
    return std::vector<Family>{f};
  });
  EXPECT_EQ(Parse(r.Render()).samples.at("elastrun_jobs{state=\"running\"}"), 1);
  EXPECT_EQ(Parse(r.Render()).samples.at("elastrun_jobs{state=\"running\"}"), 2);
}

TEST(MetricsTest, FormatsSpecialValues) {
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(-2), "-2");
  EXPECT_EQ(FormatValue(0.5), "0.5");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  Registry r;
  Counter& c = r.GetCounter("c_total", "c");
  Histogram& h = r.GetHistogram("h", "h", {1});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(0.5);
        r.GetGauge("g", "g", {{"t", "x"}}).Add(1);
      }
    });
  }
  std::thread renderer([&] {
    for (int i = 0; i < 50; ++i) Parse(r.Render());
  });
  for (std::thread& t : threads) t.join();
  renderer.join();
  const Parsed p = Parse(r.Render());
  EXPECT_EQ(p.samples.at("c_total"), 40000);
  EXPECT_EQ(p.samples.at("h_count"), 40000);
  EXPECT_EQ(p.samples.at("g{t=\"x\"}"), 40000);
}

// --- the HTTP server ---

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  // A generous read deadline: a test never hangs on a server that is wrong.
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Reads until the server closes; "<timeout>" when it does not within 10 s.
std::string ReadAll(int fd) {
  std::string out;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n == 0) return out;
    if (n < 0) return out + "<timeout>";
    out.append(buf, n);
  }
}

std::string Get(int port, const std::string& request) {
  const int fd = Connect(port);
  EXPECT_EQ(::write(fd, request.data(), request.size()),
            static_cast<ssize_t>(request.size()));
  std::string answer = ReadAll(fd);
  ::close(fd);
  return answer;
}

TEST(MetricsServerTest, ServesMetricsAndRefusesOtherPaths) {
  Registry r;
  r.GetCounter("elastrun_rounds_total", "Rounds.").Increment(7);
  MetricsServerOptions o;
  o.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<MetricsServer>> s = MetricsServer::Create(o, &r);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_GT((*s)->port(), 0);
  EXPECT_EQ((*s)->address(), "127.0.0.1:" + std::to_string((*s)->port()));

  const std::string ok =
      Get((*s)->port(), "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(ok, "HTTP/1.1 200 OK\r\n")) << ok;
  EXPECT_TRUE(absl::StrContains(ok, "Content-Type: text/plain; version=0.0.4")) << ok;
  const std::string body = ok.substr(ok.find("\r\n\r\n") + 4);
  EXPECT_EQ(Parse(body).samples.at("elastrun_rounds_total"), 7);
  EXPECT_TRUE(absl::StrContains(ok, "Content-Length: " + std::to_string(body.size())));

  const std::string missing = Get((*s)->port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(missing, "HTTP/1.1 404 ")) << missing;
  const std::string post = Get((*s)->port(), "POST /metrics HTTP/1.1\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(post, "HTTP/1.1 405 ")) << post;
  const std::string junk = Get((*s)->port(), "hello\r\n\r\n");
  EXPECT_TRUE(absl::StartsWith(junk, "HTTP/1.1 400 ")) << junk;
}

TEST(MetricsServerTest, ClosesIdleConnectionsAndServesOthersMeanwhile) {
  Registry r;
  MetricsServerOptions o;
  o.idle_timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<MetricsServer>> s = MetricsServer::Create(o, &r);
  ASSERT_TRUE(s.ok()) << s.status();
  const int idle = Connect((*s)->port());
  ASSERT_EQ(::write(idle, "GET /metr", 9), 9);  // never finished
  // Served while the idle one is open: one thread, but never blocked on it.
  EXPECT_TRUE(absl::StartsWith(Get((*s)->port(), "GET /metrics HTTP/1.0\r\n\r\n"),
                               "HTTP/1.1 200 OK"));
  EXPECT_EQ(ReadAll(idle), "");  // closed by the server, not timed out here
  ::close(idle);
}

TEST(MetricsServerTest, RefusesBadAddressesAndPortsInUse) {
  Registry r;
  MetricsServerOptions o;
  o.listen = "nonsense";
  EXPECT_TRUE(absl::IsInvalidArgument(MetricsServer::Create(o, &r).status()));
  o.listen = "127.0.0.1:0";
  absl::StatusOr<std::unique_ptr<MetricsServer>> first = MetricsServer::Create(o, &r);
  ASSERT_TRUE(first.ok());
  o.listen = (*first)->address();
  absl::Status st = MetricsServer::Create(o, &r).status();
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), (*first)->address())) << st;
}

}  // namespace
}  // namespace elastrun::metrics
