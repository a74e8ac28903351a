// The open Watch stream of each node: where commands to a node go.
#ifndef ELASTRUN_RENDEZVOUS_NODE_STREAMS_H_
#define ELASTRUN_RENDEZVOUS_NODE_STREAMS_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "elastrun/v1/rendezvous.pb.h"
#include "rendezvous/outbox.h"

namespace elastrun::rendezvous {

// Not thread-safe: the Coordinator serializes calls under its mutex. Nothing
// is sent or closed here: it goes into the caller's Outbox.
class NodeStreams {
 public:
  // Queues `command` for the node's stream. A node without a stream misses
  // it: commands are idempotent and the node's resync on attach sends what
  // it must be doing, so nothing is lost for good.
  void Send(Outbox& out, const std::string& node_id, v1::Command command) const;
  // Makes `stream` the node's stream; an older one is closed (ABORTED,
  // superseded) and forgotten first, so its Detach is not a node loss.
  void Attach(Outbox& out, const std::string& node_id,
              std::shared_ptr<NodeStream> stream);
  // Forgets `stream` if it is still the node's stream; returns whether it was.
  bool Detach(const std::string& node_id, const NodeStream* stream);
  // Closes and forgets the node's stream, if any.
  void Close(Outbox& out, const std::string& node_id, const absl::Status& why);
  // Closes and forgets every stream.
  void CloseAll(Outbox& out, const absl::Status& why);
  bool watching(const std::string& node_id) const { return streams_.count(node_id) > 0; }

 private:
  std::map<std::string, std::shared_ptr<NodeStream>> streams_;
};

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_NODE_STREAMS_H_
