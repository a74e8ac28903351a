#include "launcher/protocol/context.h"

namespace elastrun::launcher {

AttemptContext ContextFor(const std::string& run_id, const rendezvous::RoundAssignment& a,
                          const rendezvous::NodeAssignment& node,
                          const std::string& attempt_dir) {
  AttemptContext ctx;
  ctx.run_id = run_id;
  ctx.round = a.round;
  ctx.restart_count = a.restart_count;
  ctx.master_addr = a.master_addr;
  ctx.master_port = a.master_port;
  ctx.world_size = a.world_size;
  ctx.group_rank = node.group_rank;
  ctx.group_world_size = a.group_world_size;
  ctx.rank_offset = node.rank_offset;
  ctx.attempt_dir = attempt_dir;
  return ctx;
}

}  // namespace elastrun::launcher
