#include "rendezvous/node_streams.h"

#include <utility>

namespace elastrun::rendezvous {

void NodeStreams::Send(Outbox& out, const std::string& node_id,
                       v1::Command command) const {
  auto it = streams_.find(node_id);
  if (it == streams_.end()) return;
  out.sends.emplace_back(it->second, std::move(command));
}

void NodeStreams::Attach(Outbox& out, const std::string& node_id,
                         std::shared_ptr<NodeStream> stream) {
  Close(out, node_id, absl::AbortedError("superseded by a newer Watch stream"));
  streams_[node_id] = std::move(stream);
}

bool NodeStreams::Detach(const std::string& node_id, const NodeStream* stream) {
  auto it = streams_.find(node_id);
  if (it == streams_.end() || it->second.get() != stream) return false;
  streams_.erase(it);
  return true;
}

void NodeStreams::Close(Outbox& out, const std::string& node_id,
                        const absl::Status& why) {
  auto it = streams_.find(node_id);
  if (it == streams_.end()) return;
  out.closes.emplace_back(it->second, why);
  streams_.erase(it);
}

void NodeStreams::CloseAll(Outbox& out, const absl::Status& why) {
  for (auto& [id, stream] : streams_) out.closes.emplace_back(stream, why);
  streams_.clear();
}

}  // namespace elastrun::rendezvous
