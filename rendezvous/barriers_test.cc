#include "rendezvous/barriers.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::rendezvous {
namespace {

using ::testing::ElementsAre;

// Records each outcome under a name, as a caller's reply would.
class Outcomes {
 public:
  BarrierDone For(const std::string& who) {
    return [this, who](absl::Status st) { got.emplace_back(who, st.code()); };
  }
  std::vector<std::pair<std::string, absl::StatusCode>> got;
};

TEST(BarrierTableTest, LastArrivalReleasesEveryone) {
  BarrierTable t;
  Outcomes o;
  Outbox out;
  BarrierDone a = o.For("a"), b = o.For("b"), c = o.For("c");
  absl::StatusOr<uint64_t> id = t.Arrive(out, "j", 0, "ready", "a", 3, a);
  ASSERT_TRUE(id.ok());
  EXPECT_NE(*id, 0u);
  ASSERT_TRUE(t.Arrive(out, "j", 0, "ready", "b", 3, b).ok());
  out.Deliver();
  EXPECT_TRUE(o.got.empty());  // nobody passes before the last one
  id = t.Arrive(out, "j", 0, "ready", "c", 3, c);
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(*id, 0u);
  out.Deliver();
  EXPECT_THAT(o.got, ElementsAre(std::pair{std::string("a"), absl::StatusCode::kOk},
                                 std::pair{std::string("b"), absl::StatusCode::kOk},
                                 std::pair{std::string("c"), absl::StatusCode::kOk}));
  EXPECT_EQ(t.waiting(), 0u);
  // A late repeat of a complete barrier passes at once.
  BarrierDone again = o.For("a2");
  EXPECT_EQ(*t.Arrive(out, "j", 0, "ready", "a", 3, again), 0u);
}

TEST(BarrierTableTest, AbortJobFailsItsWaitersOnly) {
  BarrierTable t;
  Outcomes o;
  Outbox out;
  BarrierDone a = o.For("a"), x = o.For("x");
  ASSERT_TRUE(t.Arrive(out, "j1", 0, "ready", "a", 2, a).ok());
  ASSERT_TRUE(t.Arrive(out, "j2", 0, "ready", "x", 2, x).ok());
  t.AbortJob(out, "j1", absl::AbortedError("round ended"));
  out.Deliver();
  EXPECT_THAT(o.got,
              ElementsAre(std::pair{std::string("a"), absl::StatusCode::kAborted}));
  EXPECT_EQ(t.waiting(), 1u);
  t.AbortAll(out, absl::UnavailableError("stopping"));
  out.Deliver();
  EXPECT_EQ(o.got.back(), (std::pair{std::string("x"), absl::StatusCode::kUnavailable}));
}

TEST(BarrierTableTest, AbandonReturnsTheDoneOnceAndTheArrivalStaysCounted) {
  BarrierTable t;
  Outcomes o;
  Outbox out;
  BarrierDone a = o.For("a"), b = o.For("b");
  const uint64_t id = *t.Arrive(out, "j", 0, "ready", "a", 2, a);
  BarrierDone back = t.Abandon(id);
  ASSERT_TRUE(back);
  EXPECT_FALSE(t.Abandon(id));
  EXPECT_EQ(*t.Arrive(out, "j", 0, "ready", "b", 2, b), 0u);  // a counted
  out.Deliver();
  EXPECT_THAT(o.got, ElementsAre(std::pair{std::string("b"), absl::StatusCode::kOk}));
}

TEST(BarrierTableTest, BadNamesAndTooManyBarriersAreRefused) {
  BarrierTable t;
  Outbox out;
  BarrierDone d = [](absl::Status) {};
  EXPECT_EQ(t.Arrive(out, "j", 0, "", "a", 2, d).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.Arrive(out, "j", 0, std::string(BarrierTable::kMaxName + 1, 'n'), "a", 2, d)
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  for (size_t i = 0; i < BarrierTable::kMaxPerRound; ++i) {
    BarrierDone w = [](absl::Status) {};
    ASSERT_TRUE(t.Arrive(out, "j", 0, "b" + std::to_string(i), "a", 2, w).ok());
  }
  EXPECT_EQ(t.Arrive(out, "j", 0, "one-more", "a", 2, d).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(d);  // untouched on error: the caller still answers
  // A newer round starts empty.
  EXPECT_TRUE(t.Arrive(out, "j", 1, "one-more", "a", 2, d).ok());
}

}  // namespace
}  // namespace elastrun::rendezvous
