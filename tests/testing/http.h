// A minimal HTTP/1.1 GET for tests that read a metrics endpoint or a
// Prometheus server's API: one request, "Connection: close", the whole
// answer read until the server closes, with a deadline.
#ifndef ELASTRUN_TESTS_TESTING_HTTP_H_
#define ELASTRUN_TESTS_TESTING_HTTP_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace elastrun::testing {

struct HttpAnswer {
  int status = 0;    // 200, 404, ...
  std::string head;  // status line and headers
  std::string body;
};

// GET http://HOST:PORT`path` (an IPv4 host). Unavailable when nothing
// listens or the answer is malformed; DeadlineExceeded past `timeout`.
absl::StatusOr<HttpAnswer> HttpGet(const std::string& host_port, const std::string& path,
                                   absl::Duration timeout = absl::Seconds(10));

}  // namespace elastrun::testing

#endif  // ELASTRUN_TESTS_TESTING_HTTP_H_
