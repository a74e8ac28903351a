// The scheduling policy alone: which jobs get nodes, in what order, and why
// the others wait. What placing does (rounds, commands) is the caller's;
// here the placement callback only records and reserves.
#include "rendezvous/scheduler.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/job_spec.h"
#include "rendezvous/store.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(":memory:");
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    jobs_ = std::make_unique<JobTable>(store_.get(), JobTableOptions{absl::Seconds(2)});
  }
  void AddNode(const std::string& id, int slots, const std::string& pool = "") {
    v1::RegisterNodeRequest r;
    r.set_node_id(id);
    r.set_incarnation("inc");
    r.set_addr(id + ".test");
    r.set_slots(slots);
    r.set_pool(pool);
    registry_.Register(r, now_);
  }
  // A job of `min`:`max` nodes x `nproc`; its id.
  std::string Submit(const std::string& name, int nproc, int min, int max,
                     const std::string& pool = "") {
    v1::JobSpec s;
    s.set_name(name);
    s.set_min_nodes(min);
    s.set_max_nodes(max);
    s.set_nproc_per_node(nproc);
    s.set_pool(pool);
    s.add_argv("prog");
    absl::StatusOr<JobRecord*> job = jobs_->Submit(WithDefaults(s), now_, "");
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? (*job)->id : "";
  }
  // One pass; what was placed where ("+" marks growth), in order.
  std::vector<std::pair<std::string, std::string>> Schedule() {
    std::vector<std::pair<std::string, std::string>> placed;
    ScheduleJobs(registry_, *jobs_,
                 [&](JobRecord& job, const std::vector<std::string>& nodes, bool first) {
                   if (first) {
                     job.core = *RendezvousCore::Create(job.id, RoundConfigFromSpec(job.spec),
                                                        now_);
                   }
                   for (const std::string& n : nodes) {
                     registry_.Reserve(n, job.id, job.spec.nproc_per_node());
                     job.placed.push_back(n);
                     placed.emplace_back((first ? "" : "+") + job.id, n);
                   }
                 });
    return placed;
  }
  std::string Reason(const std::string& id) { return (*jobs_->Find(id))->pending_reason; }

  absl::Time now_ = absl::UnixEpoch() + absl::Hours(1);
  NodeRegistry registry_{LeaseOptions{}};
  std::unique_ptr<Store> store_;
  std::unique_ptr<JobTable> jobs_;
};

TEST_F(SchedulerTest, SubmissionOrderWithBackfillAndHeldSlots) {
  AddNode("a", 4);
  AddNode("b", 2);
  const std::string first = Submit("first", 2, 1, 1);    // a: the most free slots
  const std::string bigger = Submit("bigger", 4, 1, 1);  // a has 2 free: waits, holds a
  const std::string small = Submit("small", 2, 1, 1);    // backfills onto b
  const std::string late = Submit("late", 2, 1, 1);      // a's 2 free are held; holds b
  const std::string huge = Submit("huge", 8, 1, 1);      // no node could ever
  EXPECT_THAT(Schedule(), ElementsAre(Pair(first, "a"), Pair(small, "b")));
  EXPECT_THAT(Schedule(), IsEmpty());
  EXPECT_EQ(Reason(first), "");
  EXPECT_EQ(Reason(bigger),
            "waiting for free slots: needs 1 node(s) with 4 free slot(s) each (held for it "
            "as other jobs end)");
  EXPECT_EQ(Reason(late),
            "waiting for free slots: needs 1 node(s) with 2 free slot(s) each (held for it "
            "as other jobs end)");
  // Behind them, one of the same shape is not weighed again; and one that
  // nothing is left to hold for waits behind them.
  const std::string later = Submit("later", 2, 1, 1);
  const std::string last = Submit("last", 4, 1, 1);
  EXPECT_THAT(Schedule(), IsEmpty());
  EXPECT_EQ(Reason(huge),
            "waiting for nodes: job needs 1 node(s) with 8 slots each; registered: a (4 "
            "slots), b (2 slots)");
  EXPECT_EQ(Reason(later),
            "waiting for free slots: needs 1 node(s) with 2 free slot(s) each, behind "
            "earlier queued jobs");
  EXPECT_EQ(Reason(last),
            "waiting for free slots: needs 1 node(s) with 4 free slot(s) each, behind "
            "earlier queued jobs");
  // A new node goes to the first in the queue; what it held is free again.
  AddNode("c", 4);
  EXPECT_THAT(Schedule(), ElementsAre(Pair(bigger, "c"), Pair(late, "a")));
  EXPECT_EQ(Reason(late), "");
  EXPECT_THAT(Schedule(), IsEmpty());
}

TEST_F(SchedulerTest, PlacedJobsGrowWithinTheirPoolAndNeverIntoHeldSlots) {
  AddNode("a", 2);
  AddNode("p1", 2, "run.x");
  const std::string elastic = Submit("elastic", 2, 1, 3, "run.x");
  EXPECT_THAT(Schedule(), ElementsAre(Pair(elastic, "p1")));
  // A node of another pool is not for it; one of its pool is.
  AddNode("c", 2);
  EXPECT_THAT(Schedule(), IsEmpty());
  AddNode("p2", 2, "run.x");
  EXPECT_THAT(Schedule(), ElementsAre(Pair("+" + elastic, "p2")));
  // A queued job of the pool holds the pool's next free node against the
  // placed job's growth.
  const std::string waiting = Submit("waiting", 2, 1, 1, "run.x");
  AddNode("p3", 2, "run.x");
  EXPECT_THAT(Schedule(), ElementsAre(Pair(waiting, "p3")));
  AddNode("p4", 2, "run.x");
  EXPECT_THAT(Schedule(), ElementsAre(Pair("+" + elastic, "p4")));
}

}  // namespace
}  // namespace elastrun::rendezvous
