// The Watch commands the service sends to nodes, built from job records.
#ifndef ELASTRUN_RENDEZVOUS_COMMANDS_H_
#define ELASTRUN_RENDEZVOUS_COMMANDS_H_

#include <cstdint>
#include <string>

#include "elastrun/v1/rendezvous.pb.h"
#include "rendezvous/job_table.h"
#include "rendezvous/types.h"

namespace elastrun::rendezvous {

// Join the job's current round.
v1::Command JoinCommand(const JobRecord& job);
// The StartAttempt of round `a` without node entries: ForNode() makes a
// node's copy carrying only that node's own entry (the full list to each of
// N nodes is N x N entries: 35 MB per round at 1000 nodes).
v1::Command StartCommand(const JobRecord& job, const RoundAssignment& a);
v1::Command ForNode(const v1::Command& start, const NodeAssignment& node);
// Stop the attempt of `round`.
v1::Command StopCommand(const std::string& job_id, int64_t round,
                        const std::string& reason);
// The node has nothing more to do for the job.
v1::Command EndJobCommand(const std::string& job_id, v1::JobState state,
                          const std::string& reason);

}  // namespace elastrun::rendezvous

#endif  // ELASTRUN_RENDEZVOUS_COMMANDS_H_
