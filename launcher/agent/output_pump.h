// The output pump of one attempt: moves what workers write to their pipes
// into OutputStreams (log file, console, line callback) as soon as it is
// readable, and drains the rest when the attempt ends.
//
// Not thread-safe: used on the agent's loop thread.
#ifndef ELASTRUN_LAUNCHER_AGENT_OUTPUT_PUMP_H_
#define ELASTRUN_LAUNCHER_AGENT_OUTPUT_PUMP_H_

#include <memory>
#include <vector>

#include "launcher/agent/output.h"
#include "launcher/agent/poller.h"

namespace elastrun::launcher {

class OutputPump {
 public:
  explicit OutputPump(Poller* poller) : poller_(poller) {}
  // Finish()es.
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;

  // Pumps `fd` (the non-blocking read end of a pipe, owned from now on; -1:
  // none, then `out` only keeps its log file open) into `out` until EOF.
  void Add(int fd, std::unique_ptr<OutputStream> out);

  // The attempt is over: reads what the pipes still hold without waiting
  // (a pipe kept open by a leftover process must not hold the attempt),
  // ends every stream (a last partial line goes out) and closes the pipes.
  void Finish();

  // Pipes not at EOF yet.
  size_t open_pipes() const;

 private:
  struct Stream {
    int fd = -1;
    std::unique_ptr<OutputStream> out;
  };
  void Drain(Stream& s, bool final);

  Poller* const poller_;
  // unique_ptr: callbacks hold a Stream's address while the vector grows.
  std::vector<std::unique_ptr<Stream>> streams_;
};

}  // namespace elastrun::launcher

#endif  // ELASTRUN_LAUNCHER_AGENT_OUTPUT_PUMP_H_
