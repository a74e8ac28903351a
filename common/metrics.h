// Prometheus metrics: a small thread-safe registry of counters, gauges and
// histograms (fixed buckets, labels), rendered in the text exposition
// format 0.0.4, and collectors that compute families at scrape time from
// state their owner already keeps (jobs by state, nodes), so that nothing
// has to be kept in step on the hot paths.
//
// Updating a metric is cheap: a counter or gauge is one atomic operation, a
// histogram observation a short critical section of its own. The registry's
// lock is taken only to create a series and to render.
#ifndef ELASTRUN_COMMON_METRICS_H_
#define ELASTRUN_COMMON_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace elastrun::metrics {

// Label pairs of one series, e.g. {{"state", "running"}}. Order is kept in
// the output; names must match [a-zA-Z_][a-zA-Z0-9_]*.
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count. Thread-safe (one atomic).
class Counter {
 public:
  void Increment(int64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  int64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> value_{0};
};

// A value that goes up and down. Thread-safe (one atomic).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into fixed buckets (upper bounds, ascending; +Inf is
// implicit). Thread-safe.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then +Inf (= count)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot snapshot() const;

 private:
  const std::vector<double> bounds_;
  mutable absl::Mutex mu_;
  std::vector<uint64_t> counts_ ABSL_GUARDED_BY(mu_);  // per bucket, not cumulative
  double sum_ ABSL_GUARDED_BY(mu_) = 0;
};

// Latency buckets in seconds, 1 ms to 5 min: rendezvous and restarts range
// from milliseconds (a standby activation) to minutes (a join timeout).
std::vector<double> LatencyBuckets();

// One series computed by a collector at scrape time.
struct Sample {
  Labels labels;
  double value = 0;
};
// A family of gauge or counter samples computed at scrape time.
struct Family {
  std::string name;
  std::string help;
  std::string type = "gauge";  // "gauge" or "counter"
  std::vector<Sample> samples;
};
// Called (under no lock of the registry's) at every render.
using Collector = std::function<std::vector<Family>()>;

// Owns every metric; references returned stay valid for its lifetime.
// Thread-safe. Asking again for a (name, labels) pair returns the same
// metric; asking for a name already registered with another type or help
// text is a programming error (CHECK-style abort).
class Registry {
 public:
  Counter& GetCounter(const std::string& name, const std::string& help,
                      const Labels& labels = {});
  Gauge& GetGauge(const std::string& name, const std::string& help,
                  const Labels& labels = {});
  Histogram& GetHistogram(const std::string& name, const std::string& help,
                          const std::vector<double>& bounds, const Labels& labels = {});
  void AddCollector(Collector collector);

  // The text exposition format 0.0.4: families sorted by name, each with
  // its HELP and TYPE lines; collectors' families after the registered ones.
  std::string Render() const;

 private:
  struct Series {
    Labels labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  struct Entry {
    std::string help;
    std::string type;
    std::vector<std::unique_ptr<Series>> series;
  };
  Series& Find(const std::string& name, const std::string& help, const std::string& type,
               const Labels& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::map<std::string, Entry> families_ ABSL_GUARDED_BY(mu_);
  std::vector<Collector> collectors_ ABSL_GUARDED_BY(mu_);
};

// Text-format pieces, exposed for tests and collectors.
// HELP text: backslash and newline escaped.
std::string EscapeHelp(absl::string_view text);
// A label value: backslash, double quote and newline escaped.
std::string EscapeLabelValue(absl::string_view text);
// A sample value: integers without exponent, "+Inf", "-Inf", "NaN".
std::string FormatValue(double v);
// Appends `name{labels} value\n`.
void AppendSample(std::string& out, absl::string_view name, const Labels& labels,
                  double value);

}  // namespace elastrun::metrics

#endif  // ELASTRUN_COMMON_METRICS_H_
