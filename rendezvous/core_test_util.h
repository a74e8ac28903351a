// Helpers shared by the rendezvous core tests.
#ifndef ELASTRUN_RENDEZVOUS_CORE_TEST_UTIL_H_
#define ELASTRUN_RENDEZVOUS_CORE_TEST_UTIL_H_

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "rendezvous/core.h"

namespace elastrun::rendezvous::testing {

inline absl::Time T0() { return absl::UnixEpoch() + absl::Hours(1); }

inline RoundConfig Config(int min_nodes, int max_nodes, int max_restarts = 0) {
  RoundConfig c;
  c.min_nodes = min_nodes;
  c.max_nodes = max_nodes;
  c.max_restarts = max_restarts;
  c.last_call_timeout = absl::Seconds(5);
  c.join_timeout = absl::Seconds(60);
  return c;
}

inline JoinRequest Req(const std::string& id, int local_world_size = 1) {
  JoinRequest r;
  r.node_id = id;
  r.addr = absl::StrCat(id, ".cluster");
  r.master_port = 29500 + static_cast<int>(id.size());
  r.local_world_size = local_world_size;
  return r;
}

inline Failure Fail(const std::string& node, int64_t round, absl::Time time,
                    int rank = 0) {
  Failure f;
  f.node_id = node;
  f.round = round;
  f.rank = rank;
  f.local_rank = 0;
  f.exit_code = 1;
  f.message = absl::StrCat("boom on ", node);
  f.time = time;
  return f;
}

// Joins and expects success; returns the events.
inline std::vector<Event> MustJoin(RendezvousCore& core, const JoinRequest& r,
                                   absl::Time now) {
  absl::StatusOr<std::vector<Event>> ev = core.Join(r, now);
  EXPECT_TRUE(ev.ok()) << ev.status();
  return ev.ok() ? *ev : std::vector<Event>{};
}

// The kinds of `events`, in order, for compact expectations.
inline std::vector<Event::Kind> Kinds(const std::vector<Event>& events) {
  std::vector<Event::Kind> kinds;
  for (const Event& e : events) kinds.push_back(e.kind);
  return kinds;
}

// Node ids by group rank.
inline std::vector<std::string> RankOrder(const RoundAssignment& a) {
  std::vector<std::string> ids;
  for (const NodeAssignment& n : a.nodes) ids.push_back(n.node_id);
  return ids;
}

}  // namespace elastrun::rendezvous::testing

#endif  // ELASTRUN_RENDEZVOUS_CORE_TEST_UTIL_H_
