// The registration flood of issue 11 through real gRPC: 10,000 RegisterNode
// calls with fresh ids. ListNodes answers in pages, none near gRPC's 4 MiB
// limit, every node once; once the nodes are lost and their expiry passed
// (a FakeClock; the timer thread is off and the test calls Tick), none is
// listed, their rows are gone and the state file has shrunk back.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>

#include <filesystem>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "elastrun/v1/jobs.grpc.pb.h"
#include "elastrun/v1/rendezvous.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rendezvous/server.h"
#include "rendezvous/store.h"

namespace elastrun::rendezvous {
namespace {

constexpr int kNodes = 10000;
constexpr absl::Duration kLease = absl::Seconds(3);
constexpr absl::Duration kExpiry = absl::Minutes(10);
// What a gRPC client accepts in one message by default.
constexpr size_t kGrpcDefaultLimit = 4 << 20;

int64_t FileBytes(const std::string& path) {
  int64_t total = 0;
  for (const std::string& p : {path, path + "-wal"}) {
    struct stat st;
    if (::stat(p.c_str(), &st) == 0) total += st.st_size;
  }
  return total;
}

class ServerNodesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/elastrun_server_nodes_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/state.db";
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.timer_thread = false;
    o.coordinator.clock = &clock_;
    o.coordinator.state_path = path_;
    o.coordinator.lease.lease_timeout = kLease;
    o.coordinator.lease.node_expiry = kExpiry;
    // Every node's lease is kLease: no interval grown with the cluster
    // (registry_test covers that), so one Advance loses them all.
    o.coordinator.lease.max_heartbeat_rate = 0;
    absl::StatusOr<std::unique_ptr<RendezvousServer>> s = RendezvousServer::Create(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                       grpc::InsecureChannelCredentials());
    rdzv_ = v1::Rendezvous::NewStub(channel);
    jobs_ = v1::Jobs::NewStub(channel);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // Every node, page after page, as the CLI fetches them; checks each page.
  std::vector<std::string> ListAll(int* pages) {
    std::vector<std::string> ids;
    v1::ListNodesRequest r;
    size_t total_bytes = 0;
    for (*pages = 1;; ++*pages) {
      v1::ListNodesResponse page;
      grpc::ClientContext ctx;
      grpc::Status st = jobs_->ListNodes(&ctx, r, &page);
      EXPECT_TRUE(st.ok()) << st.error_message();
      if (!st.ok()) return ids;
      EXPECT_LT(page.ByteSizeLong(), kGrpcDefaultLimit / 2);
      total_bytes += page.ByteSizeLong();
      for (const v1::NodeInfo& n : page.nodes()) ids.push_back(n.node_id());
      if (page.next_page_token().empty()) break;
      r.set_page_token(page.next_page_token());
    }
    // Without pages the answer would be over the limit: what the flood broke.
    if (ids.size() == kNodes) {
      EXPECT_GT(total_bytes, kGrpcDefaultLimit);
    }
    return ids;
  }

  FakeClock clock_;
  std::string dir_;
  std::string path_;
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<v1::Rendezvous::Stub> rdzv_;
  std::unique_ptr<v1::Jobs::Stub> jobs_;
};

TEST_F(ServerNodesTest, AFloodOfFreshNodeIdsIsListedInPagesThenExpiresAndShrinksTheFile) {
  for (int i = 0; i < kNodes; ++i) {
    v1::RegisterNodeRequest r;
    r.set_node_id(absl::StrCat("flood-", i));
    r.set_incarnation("inc");
    r.set_addr(absl::StrCat("10.0.", i / 256, ".", i % 256));
    r.set_slots(1);
    for (int l = 0; l < 4; ++l) (*r.mutable_labels())[absl::StrCat("k", l)] = std::string(250, 'v');
    v1::RegisterNodeResponse resp;
    grpc::ClientContext ctx;
    grpc::Status st = rdzv_->RegisterNode(&ctx, r, &resp);
    ASSERT_TRUE(st.ok()) << i << ": " << st.error_message();
  }
  int pages = 0;
  std::vector<std::string> ids = ListAll(&pages);
  EXPECT_EQ(ids.size(), static_cast<size_t>(kNodes));
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()).size(), ids.size());
  EXPECT_GE(pages, kNodes / 500);
  const int64_t peak = FileBytes(path_);
  EXPECT_GT(peak, kNodes * 1000);

  clock_.Advance(kLease);
  server_->Tick();  // every lease ran out: all LOST, still listed
  ids = ListAll(&pages);
  EXPECT_EQ(ids.size(), static_cast<size_t>(kNodes));

  clock_.Advance(kExpiry);
  server_->Tick();
  ids = ListAll(&pages);
  EXPECT_TRUE(ids.empty()) << ids.size() << " nodes still listed";
  EXPECT_EQ(pages, 1);
  EXPECT_EQ(server_->coordinator().store_writes().node_deletes, kNodes);
  EXPECT_LT(FileBytes(path_), peak / 10) << "peak " << peak;

  // The rows are gone, not only hidden: a restarted service loads none.
  server_.reset();
  absl::StatusOr<std::unique_ptr<Store>> store = Store::Open(path_);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<Store::Contents> contents = (*store)->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_TRUE(contents->nodes.empty()) << contents->nodes.size() << " rows left";
}

}  // namespace
}  // namespace elastrun::rendezvous
