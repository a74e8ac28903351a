#include "common/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace elastrun::metrics {

void Gauge::Add(double d) {
  double cur = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(cur, cur + d, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end())) {
    std::fprintf(stderr, "metrics: histogram bounds must ascend\n");
    std::abort();
  }
}

void Histogram::Observe(double v) {
  // The first bucket whose upper bound holds v ("le" is inclusive).
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  absl::MutexLock lock(&mu_);
  ++counts_[i];
  sum_ += v;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot s;
  s.bounds = bounds_;
  absl::MutexLock lock(&mu_);
  uint64_t running = 0;
  for (uint64_t c : counts_) {
    running += c;
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_;
  return s;
}

std::vector<double> LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
          1,     2.5,    5,     10,   30,    60,   120, 300};
}

namespace {

// The text format's escapes: backslash and newline always, the double
// quote inside label values only.
std::string Escape(absl::string_view text, bool quote) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string EscapeHelp(absl::string_view text) { return Escape(text, /*quote=*/false); }

std::string EscapeLabelValue(absl::string_view text) { return Escape(text, /*quote=*/true); }

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    return absl::StrFormat("%d", static_cast<int64_t>(v));
  }
  return absl::StrFormat("%.17g", v);
}

void AppendSample(std::string& out, absl::string_view name, const Labels& labels,
                  double value) {
  absl::StrAppend(&out, name);
  if (!labels.empty()) {
    out += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out += ',';
      absl::StrAppend(&out, labels[i].first, "=\"", EscapeLabelValue(labels[i].second),
                      "\"");
    }
    out += '}';
  }
  absl::StrAppend(&out, " ", FormatValue(value), "\n");
}

Registry::Series& Registry::Find(const std::string& name, const std::string& help,
                                 const std::string& type, const Labels& labels) {
  auto [it, added] = families_.try_emplace(name);
  Entry& e = it->second;
  if (added) {
    e.help = help;
    e.type = type;
  } else if (e.type != type) {
    std::fprintf(stderr, "metrics: %s registered as %s and as %s\n", name.c_str(),
                 e.type.c_str(), type.c_str());
    std::abort();
  }
  for (const std::unique_ptr<Series>& s : e.series) {
    if (s->labels == labels) return *s;
  }
  e.series.push_back(std::make_unique<Series>());
  e.series.back()->labels = labels;
  return *e.series.back();
}

Counter& Registry::GetCounter(const std::string& name, const std::string& help,
                              const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Series& s = Find(name, help, "counter", labels);
  if (!s.counter) s.counter = std::make_unique<Counter>();
  return *s.counter;
}

Gauge& Registry::GetGauge(const std::string& name, const std::string& help,
                          const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Series& s = Find(name, help, "gauge", labels);
  if (!s.gauge) s.gauge = std::make_unique<Gauge>();
  return *s.gauge;
}

Histogram& Registry::GetHistogram(const std::string& name, const std::string& help,
                                  const std::vector<double>& bounds, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  Series& s = Find(name, help, "histogram", labels);
  if (!s.histogram) s.histogram = std::make_unique<Histogram>(bounds);
  return *s.histogram;
}

void Registry::AddCollector(Collector collector) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

namespace {

void AppendHeader(std::string& out, const std::string& name, const std::string& help,
                  const std::string& type) {
  absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ",
                  type, "\n");
}

void AppendHistogram(std::string& out, const std::string& name, const Labels& labels,
                     const Histogram::Snapshot& h) {
  for (size_t i = 0; i < h.cumulative.size(); ++i) {
    Labels with_le = labels;
    with_le.emplace_back("le", i < h.bounds.size() ? FormatValue(h.bounds[i]) : "+Inf");
    AppendSample(out, name + "_bucket", with_le, static_cast<double>(h.cumulative[i]));
  }
  AppendSample(out, name + "_sum", labels, h.sum);
  AppendSample(out, name + "_count", labels, static_cast<double>(h.count));
}

}  // namespace

std::string Registry::Render() const {
  std::string out;
  std::vector<Collector> collectors;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, e] : families_) {
      AppendHeader(out, name, e.help, e.type);
      for (const std::unique_ptr<Series>& s : e.series) {
        if (s->counter) AppendSample(out, name, s->labels, s->counter->value());
        if (s->gauge) AppendSample(out, name, s->labels, s->gauge->value());
        if (s->histogram) AppendHistogram(out, name, s->labels, s->histogram->snapshot());
      }
    }
    collectors = collectors_;
  }
  // Outside the lock: a collector takes its owner's lock, and the owner may
  // be creating a series meanwhile.
  for (const Collector& c : collectors) {
    for (const Family& f : c()) {
      AppendHeader(out, f.name, f.help, f.type);
      for (const Sample& s : f.samples) AppendSample(out, f.name, s.labels, s.value);
    }
  }
  return out;
}

}  // namespace elastrun::metrics
