#include "rendezvous/commands.h"

#include "rendezvous/codec.h"

namespace elastrun::rendezvous {

v1::Command JoinCommand(const JobRecord& job) {
  v1::Command c;
  c.mutable_join_round()->set_job_id(job.id);
  c.mutable_join_round()->set_round(job.core->round());
  *c.mutable_join_round()->mutable_spec() = job.spec;
  return c;
}

v1::Command StartCommand(const JobRecord& job, const RoundAssignment& a) {
  v1::Command c;
  c.mutable_start()->set_job_id(job.id);
  *c.mutable_start()->mutable_spec() = job.spec;
  *c.mutable_start()->mutable_assignment() = ToProto(a);
  c.mutable_start()->set_max_restarts(job.spec.max_restarts());
  c.mutable_start()->mutable_assignment()->clear_nodes();
  return c;
}

v1::Command ForNode(const v1::Command& start, const NodeAssignment& node) {
  v1::Command c = start;
  *c.mutable_start()->mutable_assignment()->add_nodes() = ToProto(node);
  return c;
}

v1::Command StopCommand(const std::string& job_id, int64_t round,
                        const std::string& reason) {
  v1::Command c;
  c.mutable_stop()->set_job_id(job_id);
  c.mutable_stop()->set_round(round);
  c.mutable_stop()->set_reason(reason);
  return c;
}

v1::Command EndJobCommand(const std::string& job_id, v1::JobState state,
                          const std::string& reason) {
  v1::Command c;
  c.mutable_end_job()->set_job_id(job_id);
  c.mutable_end_job()->set_state(state);
  c.mutable_end_job()->set_reason(reason);
  return c;
}

}  // namespace elastrun::rendezvous
