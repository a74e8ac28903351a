// `elastrun nodes` and `elastrun list` against a fake service that answers
// in pages (every page is fetched, the table and the JSON hold them all),
// and `elastrun nodes drain|remove NODE`: what is sent, what is printed,
// exit codes and usage errors.
#include <algorithm>
#include <map>
#include <memory>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "launcher/cli/cli.h"
#include "launcher/cli/format.h"

namespace elastrun::launcher {
namespace {

using ::testing::HasSubstr;

// Holds nodes and jobs and serves them `page_size` at a time; the token is
// the index of the next item.
struct PagedService {
  std::vector<std::string> nodes;
  std::vector<std::string> jobs;
  size_t page_size = 2;
  int list_calls = 0;
  std::vector<v1::NodeRequest> drains, removes;
  absl::Status node_error;  // DrainNode/RemoveNode fail with it when set
};

class PagedClient : public JobsClient {
 public:
  explicit PagedClient(PagedService* s) : s_(s) {}
  absl::StatusOr<std::string> Submit(const v1::JobSpec&, const std::string&) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<v1::JobStatus> Get(const std::string&) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<v1::JobStatus> Cancel(const std::string&, const std::string&) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<std::vector<v1::LogChunk>> ReadLogs(const std::string&, int,
                                                     int64_t) override {
    return absl::UnimplementedError("");
  }
  absl::StatusOr<v1::ListJobsResponse> List(const v1::ListJobsRequest& r) override {
    v1::ListJobsResponse resp;
    absl::StatusOr<std::string> next = Page(r.page_token(), s_->jobs, [&](const auto& id) {
      resp.add_jobs()->set_job_id(id);
    });
    if (!next.ok()) return next.status();
    resp.set_next_page_token(*next);
    return resp;
  }
  absl::StatusOr<v1::ListNodesResponse> ListNodes(const v1::ListNodesRequest& r) override {
    v1::ListNodesResponse resp;
    absl::StatusOr<std::string> next = Page(r.page_token(), s_->nodes, [&](const auto& id) {
      v1::NodeInfo* n = resp.add_nodes();
      n->set_node_id(id);
      n->set_state(v1::NODE_STATE_ALIVE);
    });
    if (!next.ok()) return next.status();
    resp.set_next_page_token(*next);
    return resp;
  }
  absl::StatusOr<v1::NodeInfo> DrainNode(const v1::NodeRequest& r) override {
    s_->drains.push_back(r);
    if (!s_->node_error.ok()) return s_->node_error;
    v1::NodeInfo n;
    n.set_node_id(r.node_id());
    n.set_draining(!r.undo());
    n.add_jobs("train-3");
    return n;
  }
  absl::StatusOr<v1::NodeInfo> RemoveNode(const v1::NodeRequest& r) override {
    s_->removes.push_back(r);
    if (!s_->node_error.ok()) return s_->node_error;
    v1::NodeInfo n;
    n.set_node_id(r.node_id());
    return n;
  }

 private:
  // Passes the items of `all` from `token` on, at most page_size, to
  // `add`; returns the next token ("" after the last page).
  template <typename Add>
  absl::StatusOr<std::string> Page(const std::string& token,
                                   const std::vector<std::string>& all, Add add) {
    ++s_->list_calls;
    size_t from = 0;
    if (!token.empty() && !absl::SimpleAtoi(token, &from)) {
      return absl::InvalidArgumentError("bad token");
    }
    const size_t to = std::min(all.size(), from + s_->page_size);
    for (size_t i = from; i < to; ++i) add(all[i]);
    return to < all.size() ? absl::StrCat(to) : "";
  }

  PagedService* s_;
};

class CliNodesTest : public ::testing::Test {
 protected:
  CliNodesTest() {
    ctx_.env = [](const std::string&) { return std::nullopt; };
    ctx_.connect = [this](const ServiceOptions&) {
      return std::make_unique<PagedClient>(&service_);
    };
    ctx_.clock = &clock_;
    ctx_.sleep = [this](absl::Duration d) { clock_.Advance(d); };
    ctx_.out = &out_;
    ctx_.err = &err_;
  }
  int Run(std::vector<std::string> args) {
    out_.str("");
    err_.str("");
    return RunCli(args, ctx_);
  }

  PagedService service_;
  FakeClock clock_;
  std::ostringstream out_, err_;
  CliContext ctx_;
};

TEST_F(CliNodesTest, NodesAndListFetchEveryPage) {
  service_.nodes = {"a", "b", "c", "d", "e"};
  service_.jobs = {"train-1", "train-2", "train-3"};
  ASSERT_EQ(Run({"nodes"}), kExitOk) << err_.str();
  EXPECT_EQ(service_.list_calls, 3);
  for (const char* id : {"\na ", "\nb ", "\nc ", "\nd ", "\ne "}) {
    EXPECT_THAT(out_.str(), HasSubstr(id));
  }
  ASSERT_EQ(Run({"nodes", "--output", "json"}), kExitOk) << err_.str();
  const Json j = Json::parse(out_.str());
  EXPECT_EQ(j["nodes"].size(), 5u);
  EXPECT_FALSE(j.contains("next_page_token"));
  ASSERT_EQ(Run({"list", "--output=json"}), kExitOk) << err_.str();
  const Json jobs = Json::parse(out_.str());
  ASSERT_EQ(jobs["jobs"].size(), 3u);
  EXPECT_EQ(jobs["jobs"][2]["job_id"], "train-3");
}

TEST_F(CliNodesTest, DrainAndRemoveSendTheNodeAndPrintWhatHappened) {
  ASSERT_EQ(Run({"nodes", "drain", "n1"}), kExitOk) << err_.str();
  ASSERT_EQ(service_.drains.size(), 1u);
  EXPECT_EQ(service_.drains[0].node_id(), "n1");
  EXPECT_FALSE(service_.drains[0].undo());
  EXPECT_EQ(out_.str(), "node n1 draining; its jobs go on: train-3\n");
  ASSERT_EQ(Run({"nodes", "drain", "n1", "--undo"}), kExitOk) << err_.str();
  EXPECT_TRUE(service_.drains[1].undo());
  EXPECT_EQ(out_.str(), "node n1 is no longer draining\n");
  ASSERT_EQ(Run({"nodes", "remove", "n2", "--force"}), kExitOk) << err_.str();
  ASSERT_EQ(service_.removes.size(), 1u);
  EXPECT_TRUE(service_.removes[0].force());
  EXPECT_EQ(out_.str(), "node n2 removed\n");
  ASSERT_EQ(Run({"nodes", "drain", "n1", "--output", "json"}), kExitOk);
  EXPECT_EQ(Json::parse(out_.str())["draining"], true);

  service_.node_error = absl::FailedPreconditionError(
      "node \"n2\" holds slots of job(s) train-3; ... --force");
  EXPECT_EQ(Run({"nodes", "remove", "n2"}), kExitFailed);
  EXPECT_THAT(err_.str(), HasSubstr("elastrun nodes: node \"n2\" holds slots of job(s) train-3"));
  service_.node_error = absl::NotFoundError("no node \"zz\"");
  EXPECT_EQ(Run({"nodes", "drain", "zz"}), kExitNotFound);
}

TEST_F(CliNodesTest, NodeCommandUsageErrorsSendNothing) {
  for (const auto& [args, says] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"nodes", "drain"}, "expected: elastrun nodes drain NODE"},
           {{"nodes", "remove", "a", "b"}, "expected: elastrun nodes remove NODE"},
           {{"nodes", "cordon", "a"}, "unknown nodes command \"cordon\""},
           {{"nodes", "drain", "a", "--force"}, "--force is for nodes remove"},
           {{"nodes", "remove", "a", "--undo"}, "--undo is for nodes drain"},
           {{"nodes", "--undo"}, "--undo and --force need nodes drain|remove NODE"}}) {
    EXPECT_EQ(Run(args), kExitUsage) << says;
    EXPECT_THAT(err_.str(), HasSubstr(says));
  }
  EXPECT_TRUE(service_.drains.empty());
  EXPECT_TRUE(service_.removes.empty());
  EXPECT_EQ(service_.list_calls, 0);
}

}  // namespace
}  // namespace elastrun::launcher
