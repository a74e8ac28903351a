// The state and logs in a real etcd (Debian's etcd-server, one member on
// loopback; skipped where it is not installed), the fence of a deposed
// leader, and the leadership's loss when its lease is gone.
#include "rendezvous/etcd_store.h"

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_test_util.h"
#include "rendezvous/etcd_client.h"
#include "rendezvous/leadership.h"
#include "tests/testing/certs.h"
#include "tests/testing/etcd.h"
#include "tests/testing/subprocess.h"

namespace elastrun::rendezvous {
namespace {

class EtcdStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::EtcdMissing().empty()) return;
    dir_ = new std::string(testing::MakeTempDir("etcd_store"));
    etcd_ = new testing::EtcdCluster(
        *dir_, "ELASTRUN_TEST_MARKER=etcd-store-" + std::to_string(getpid()),
        /*members=*/1);
    etcd_->Start();
  }
  static void TearDownTestSuite() {
    delete etcd_;
    etcd_ = nullptr;
    if (dir_ != nullptr) {
      std::system(("rm -rf " + *dir_).c_str());
      delete dir_;
    }
  }

  void SetUp() override {
    if (const std::string why = testing::EtcdMissing(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_NE(etcd_, nullptr);
    EtcdOptions o;
    o.endpoints = {etcd_->endpoints()};
    absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
    // Each test its own cluster prefix.
    prefix_ = absl::StrCat(
        "/test-", ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  EtcdPlace Unfenced() const {
    EtcdPlace p;
    p.client = client_.get();
    p.prefix = prefix_;
    return p;
  }

  LeadershipOptions LeaderOptions(const std::string& value) const {
    LeadershipOptions o;
    o.client = client_.get();
    o.prefix = prefix_;
    o.value = value;
    o.lease = absl::Seconds(2);
    return o;
  }

  static std::string* dir_;
  static testing::EtcdCluster* etcd_;
  std::unique_ptr<EtcdClient> client_;
  std::string prefix_;
};

std::string* EtcdStoreTest::dir_ = nullptr;
testing::EtcdCluster* EtcdStoreTest::etcd_ = nullptr;

v1::StoredNode Node(const std::string& id) {
  v1::StoredNode n;
  n.set_node_id(id);
  n.set_addr("10.0.0.1");
  return n;
}

v1::StoredJob Job(const std::string& id, int64_t seq) {
  v1::StoredJob j;
  j.set_job_id(id);
  j.set_seq(seq);
  j.mutable_spec()->set_name(id);
  return j;
}

TEST_F(EtcdStoreTest, WhatIsWrittenLoadsBackInOrderAndTheClusterIdStays) {
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(Unfenced());
  ASSERT_TRUE(store.ok()) << store.status();
  const std::string cluster = (*store)->cluster_id();
  EXPECT_EQ(cluster.size(), 16u);
  // 250 nodes: deleting 240 of them takes three transactions (100 each).
  for (int i = 0; i < 250; ++i) {
    ASSERT_TRUE((*store)->PutNode(Node(absl::StrCat("n", 1000 + i))).ok());
  }
  // Submission order, not key order: "b-2" before "a-10".
  ASSERT_TRUE((*store)->PutJob(Job("b-2", 2)).ok());
  ASSERT_TRUE((*store)->PutJob(Job("a-10", 10)).ok());
  v1::Progress p;
  p.set_step(7);
  ASSERT_TRUE((*store)->PutProgress("b-2", p).ok());
  std::vector<std::string> gone;
  for (int i = 10; i < 250; ++i) gone.push_back(absl::StrCat("n", 1000 + i));
  ASSERT_TRUE((*store)->DeleteNodes(gone).ok());

  absl::StatusOr<std::unique_ptr<EtcdStore>> again = EtcdStore::Open(Unfenced());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ((*again)->cluster_id(), cluster);
  absl::StatusOr<Store::Contents> c = (*again)->Load();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->nodes.size(), 10u);
  EXPECT_EQ(c->nodes[0].node_id(), "n1000");
  EXPECT_EQ(c->nodes[0].addr(), "10.0.0.1");
  ASSERT_EQ(c->jobs.size(), 2u);
  EXPECT_EQ(c->jobs[0].job_id(), "b-2");
  EXPECT_EQ(c->jobs[1].job_id(), "a-10");
  ASSERT_EQ(c->progress.count("b-2"), 1u);
  EXPECT_EQ(c->progress.at("b-2").step(), 7);
}

TEST_F(EtcdStoreTest, ARecordThatDoesNotParseIsReportedNamingItsKey) {
  etcdserverpb::TxnRequest txn;
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(prefix_ + "/jobs/broken-1");
  put->set_value("\xff\xff not a job");
  ASSERT_TRUE(client_->Txn(txn).ok());
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(Unfenced());
  ASSERT_TRUE(store.ok());
  absl::StatusOr<Store::Contents> c = (*store)->Load();
  EXPECT_TRUE(absl::IsDataLoss(c.status())) << c.status();
  EXPECT_NE(c.status().message().find(prefix_ + "/jobs/broken-1"), std::string::npos)
      << c.status();
}

LogDb::Batch Chunks(const std::string& job, int64_t first, int n, const std::string& node,
                    int64_t chunk) {
  LogDb::Batch b;
  for (int i = 0; i < n; ++i) {
    v1::LogChunk c;
    c.set_seq(first + i);
    c.set_data(absl::StrCat("line ", first + i, "\n"));
    b.chunks.emplace_back(job, c);
  }
  b.senders[job][node] = LogDb::Sender{"inc-1", chunk};
  return b;
}

TEST_F(EtcdStoreTest, LogsLoadBackTrimmedAndDroppedAsWritten) {
  EtcdLogDb db(Unfenced());
  ASSERT_TRUE(db.Write(Chunks("j-1", 1, 5, "n0", 1)).ok());
  ASSERT_TRUE(db.Write(Chunks("j-1", 6, 5, "n0", 2)).ok());
  ASSERT_TRUE(db.Write(Chunks("k-2", 11, 3, "n1", 9)).ok());
  // Below 8: the first write (1..5) goes, the second (6..10) stays whole in
  // etcd but shows from 8 on.
  LogDb::Batch trim;
  trim.trim_below["j-1"] = 8;
  ASSERT_TRUE(db.Write(trim).ok());

  absl::StatusOr<std::map<std::string, std::vector<v1::LogChunk>>> logs = db.Load();
  ASSERT_TRUE(logs.ok()) << logs.status();
  std::vector<int64_t> seqs;
  for (const v1::LogChunk& c : (*logs)["j-1"]) seqs.push_back(c.seq());
  EXPECT_EQ(seqs, (std::vector<int64_t>{8, 9, 10}));
  EXPECT_EQ((*logs)["k-2"].size(), 3u);
  absl::StatusOr<LogDb::Senders> senders = db.LoadSenders();
  ASSERT_TRUE(senders.ok());
  EXPECT_EQ((*senders)["j-1"]["n0"].chunk, 2);
  EXPECT_EQ((*senders)["k-2"]["n1"].incarnation, "inc-1");
  absl::StatusOr<std::map<std::string, int64_t>> trims = db.LoadTrims();
  ASSERT_TRUE(trims.ok());
  EXPECT_EQ((*trims)["j-1"], 8);

  LogDb::Batch drop;
  drop.dropped_jobs = {"j-1"};
  ASSERT_TRUE(db.Write(drop).ok());
  logs = db.Load();
  ASSERT_TRUE(logs.ok());
  EXPECT_EQ(logs->count("j-1"), 0u);
  EXPECT_EQ(logs->count("k-2"), 1u);
  senders = db.LoadSenders();
  EXPECT_EQ(senders->count("j-1"), 0u);
}

TEST_F(EtcdStoreTest, ALargeLogWriteIsSplitWithinEtcdsLimitsAndLosesNothing) {
  EtcdLogDb db(Unfenced());
  // 300 jobs' chunks and senders (600 operations) and 3 MiB: past etcd's
  // 128 operations and 1.5 MiB a request.
  LogDb::Batch b;
  for (int j = 0; j < 300; ++j) {
    v1::LogChunk c;
    c.set_seq(j + 1);
    c.set_data(std::string(10 << 10, 'a' + j % 26));
    const std::string job = absl::StrCat("j-", j);
    b.chunks.emplace_back(job, c);
    b.senders[job]["n0"] = LogDb::Sender{"inc", 1};
  }
  ASSERT_TRUE(db.Write(b).ok());
  absl::StatusOr<std::map<std::string, std::vector<v1::LogChunk>>> logs = db.Load();
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_EQ(logs->size(), 300u);
  EXPECT_EQ((*logs)["j-299"].at(0).data(), std::string(10 << 10, 'a' + 299 % 26));
  EXPECT_EQ(db.LoadSenders()->size(), 300u);
}

// etcd keeps every old value until its history is compacted: the stores
// compact it every kCompactEvery writes, so that rewriting the same keys
// does not grow etcd without bound.
TEST_F(EtcdStoreTest, HistoryIsCompactedAsWritesGoOn) {
  absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(Unfenced());
  ASSERT_TRUE(store.ok());
  const std::string key = prefix_ + "/jobs/j-1";
  ASSERT_TRUE((*store)->PutJob(Job("j-1", 1)).ok());
  absl::StatusOr<mvccpb::KeyValue> first = client_->Get(key);
  ASSERT_TRUE(first.ok());
  for (int i = 0; i < EtcdPlace::kCompactEvery; ++i) {
    ASSERT_TRUE((*store)->PutJob(Job("j-1", 1)).ok());
  }
  // The first version is gone from etcd's history.
  etcdserverpb::TxnRequest old;
  auto* range = old.add_success()->mutable_request_range();
  range->set_key(key);
  range->set_revision(first->mod_revision());
  absl::StatusOr<etcdserverpb::TxnResponse> read = client_->Txn(old);
  EXPECT_TRUE(absl::IsOutOfRange(read.status())) << read.status();
}

// Over etcd every node write is a round trip to other machines: the
// Coordinator writes registrations behind the call, together, from its
// timer. 250 registrations cost 3 etcd transactions, not 250, and nothing
// is lost: what the timer wrote loads back, and a Shutdown writes what
// still waits.
TEST_F(EtcdStoreTest, RegistrationsAreWrittenInBatchesFromTheTimer) {
  auto coordinator_over = [&](const std::string& prefix) {
    CoordinatorOptions o;
    o.open_store = [this, prefix]() -> absl::StatusOr<std::unique_ptr<Store>> {
      EtcdPlace p = Unfenced();
      p.prefix = prefix;
      ASSIGN_OR_RETURN(std::unique_ptr<EtcdStore> store, EtcdStore::Open(std::move(p)));
      return std::unique_ptr<Store>(std::move(store));
    };
    return Coordinator::Create(std::move(o));
  };
  absl::StatusOr<std::unique_ptr<Coordinator>> c = coordinator_over(prefix_);
  ASSERT_TRUE(c.ok()) << c.status();
  // etcd's revision: one more per transaction.
  auto revision = [&]() -> int64_t {
    etcdserverpb::TxnRequest read;
    read.add_success()->mutable_request_range()->set_key(prefix_ + "/meta/cluster_id");
    absl::StatusOr<etcdserverpb::TxnResponse> r = client_->Txn(read);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->header().revision() : -1;
  };
  const int64_t before = revision();
  for (int i = 0; i < 250; ++i) {
    ASSERT_TRUE(
        (*c)->RegisterNode(coordinator_testing::RegisterRequest(absl::StrCat("n", i)))
            .ok());
  }
  EXPECT_EQ((*c)->store_writes().nodes, 0) << "written in the call, not behind it";
  (*c)->Tick();
  EXPECT_EQ((*c)->store_writes().nodes, 250);
  EXPECT_LE(revision() - before, 3) << "one etcd transaction per 100 nodes";
  absl::StatusOr<std::vector<mvccpb::KeyValue>> stored =
      client_->GetPrefix(prefix_ + "/nodes/");
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->size(), 250u);

  // Registered and not yet written when the service stops: written then.
  for (int i = 250; i < 260; ++i) {
    ASSERT_TRUE(
        (*c)->RegisterNode(coordinator_testing::RegisterRequest(absl::StrCat("n", i)))
            .ok());
  }
  (*c)->Shutdown();
  c->reset();
  absl::StatusOr<std::unique_ptr<EtcdStore>> again = EtcdStore::Open(Unfenced());
  ASSERT_TRUE(again.ok()) << again.status();
  absl::StatusOr<Store::Contents> contents = (*again)->Load();
  ASSERT_TRUE(contents.ok()) << contents.status();
  EXPECT_EQ(contents->nodes.size(), 260u);
}

// A leader whose lease ended (here revoked, as its expiry would) is deposed:
// the next leader writes, and the old one's write is refused by etcd, tells
// the old leadership it is lost, and changes nothing.
TEST_F(EtcdStoreTest, ADeposedLeaderCannotWrite) {
  std::atomic<bool> stop{false};
  std::atomic<int> lost{0};
  LeadershipOptions ao = LeaderOptions("a:1");
  ao.on_lost = [&](const std::string&) { ++lost; };
  absl::StatusOr<std::unique_ptr<Leadership>> a = Leadership::Campaign(ao, stop);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<std::unique_ptr<EtcdStore>> store_a = EtcdStore::Open((*a)->Place());
  ASSERT_TRUE(store_a.ok());
  ASSERT_TRUE((*store_a)->PutJob(Job("j-1", 1)).ok());

  // A second candidate waits while a leads.
  LeadershipOptions bo = LeaderOptions("b:2");
  absl::Notification b_leads;
  std::unique_ptr<Leadership> b;
  std::thread candidate([&] {
    absl::StatusOr<std::unique_ptr<Leadership>> led = Leadership::Campaign(bo, stop);
    if (led.ok()) b = *std::move(led);
    b_leads.Notify();
  });
  EXPECT_FALSE(b_leads.WaitForNotificationWithTimeout(absl::Seconds(2)));
  ASSERT_TRUE(client_->Revoke((*a)->key().lease()).ok());
  ASSERT_TRUE(b_leads.WaitForNotificationWithTimeout(absl::Seconds(30)));
  candidate.join();
  ASSERT_NE(b, nullptr);
  absl::StatusOr<std::unique_ptr<EtcdStore>> store_b = EtcdStore::Open(b->Place());
  ASSERT_TRUE(store_b.ok());
  v1::StoredJob by_b = Job("j-1", 1);
  by_b.mutable_spec()->set_name("written-by-b");
  ASSERT_TRUE((*store_b)->PutJob(by_b).ok());

  v1::StoredJob by_a = Job("j-1", 1);
  by_a.mutable_spec()->set_name("written-by-a");
  absl::Status refused = (*store_a)->PutJob(by_a);
  EXPECT_TRUE(absl::IsFailedPrecondition(refused)) << refused;
  EXPECT_NE(refused.message().find("no longer leads"), std::string::npos) << refused;
  EXPECT_GE(lost.load(), 1);
  EXPECT_TRUE((*a)->lost());
  absl::StatusOr<Store::Contents> c = (*store_b)->Load();
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->jobs.size(), 1u);
  EXPECT_EQ(c->jobs[0].spec().name(), "written-by-b");
  // The log store is fenced as well.
  EtcdLogDb logs_a((*a)->Place());
  EXPECT_TRUE(absl::IsFailedPrecondition(logs_a.Write(Chunks("j-1", 1, 1, "n0", 1))));
  EXPECT_TRUE(logs_a.Load()->empty());
}

// The renewing thread finds the lease gone (expired while the process was
// paused or cut off; here revoked) and declares the leadership lost within
// about a lease, without any write.
TEST_F(EtcdStoreTest, ALeaderLearnsItsLeaseIsGoneWithoutWriting) {
  std::atomic<bool> stop{false};
  absl::Notification lost;
  std::string why;
  LeadershipOptions o = LeaderOptions("a:1");
  o.on_lost = [&](const std::string& w) {
    why = w;
    lost.Notify();
  };
  absl::StatusOr<std::unique_ptr<Leadership>> a = Leadership::Campaign(o, stop);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(
      lost.WaitForNotificationWithTimeout(absl::Seconds(3)));  // renewed meanwhile
  ASSERT_TRUE(client_->Revoke((*a)->key().lease()).ok());
  ASSERT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_NE(why.find("expired"), std::string::npos) << why;
}

// A campaign stops when asked to, while another replica leads.
TEST_F(EtcdStoreTest, AFollowerStopsWaitingWhenAsked) {
  std::atomic<bool> stop{false};
  absl::StatusOr<std::unique_ptr<Leadership>> a =
      Leadership::Campaign(LeaderOptions("a:1"), stop);
  ASSERT_TRUE(a.ok());
  std::atomic<bool> stop_b{false};
  std::string leader_seen;
  LeadershipOptions bo = LeaderOptions("b:2");
  bo.on_waiting = [&](const absl::Status& etcd, const std::string& leader) {
    if (etcd.ok() && !leader.empty()) {
      leader_seen = leader;
      stop_b = true;
    }
  };
  absl::StatusOr<std::unique_ptr<Leadership>> b = Leadership::Campaign(bo, stop_b);
  EXPECT_TRUE(absl::IsCancelled(b.status())) << b.status();
  EXPECT_EQ(leader_seen, "a:1");
}

// etcd's own authentication and TLS, each on an etcd of its own.
class EtcdAccessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::EtcdMissing(); !why.empty()) GTEST_SKIP() << why;
    dir_ = testing::MakeTempDir("etcd_access");
    marker_ = "ELASTRUN_TEST_MARKER=" + dir_;
  }
  void TearDown() override {
    etcd_.reset();
    if (!dir_.empty()) std::system(("rm -rf " + dir_).c_str());
  }

  // Opens the store with `o` and writes and reads a job.
  absl::Status UseStore(const EtcdOptions& o) {
    absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Create(o);
    if (!c.ok()) return c.status();
    EtcdPlace place;
    place.client = c->get();
    place.prefix = "/access";
    absl::StatusOr<std::unique_ptr<EtcdStore>> store = EtcdStore::Open(place);
    if (!store.ok()) return store.status();
    if (absl::Status st = (*store)->PutJob(Job("j-1", 1)); !st.ok()) return st;
    absl::StatusOr<Store::Contents> contents = (*store)->Load();
    if (!contents.ok()) return contents.status();
    if (contents->jobs.size() != 1) return absl::InternalError("the job is not there");
    return absl::OkStatus();
  }

  std::string dir_, marker_;
  std::unique_ptr<testing::EtcdCluster> etcd_;
};

TEST_F(EtcdAccessTest, AUserAndPasswordAreUsedAndAWrongPasswordIsNamed) {
  etcd_ = std::make_unique<testing::EtcdCluster>(dir_, marker_, 1);
  ASSERT_NO_FATAL_FAILURE(etcd_->Start());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"user", "add", "root", "--new-user-password", "root-pw"},
        std::vector<std::string>{"auth", "enable"}}) {
    absl::StatusOr<testing::RunResult> r = etcd_->Etcdctl(args);
    ASSERT_TRUE(r.ok() && r->exit_code == 0)
        << (r.ok() ? r->output : r.status().ToString());
  }
  EtcdOptions o;
  o.endpoints = {etcd_->endpoints()};
  o.user = "root";
  o.password = "root-pw";
  absl::Status st = UseStore(o);
  EXPECT_TRUE(st.ok()) << st;

  o.password = "wrong";
  st = UseStore(o);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("authenticating as \"root\""), std::string::npos) << st;

  o.user.clear();
  st = UseStore(o);
  EXPECT_FALSE(st.ok()) << "etcd with auth took a write without a user";
}

TEST_F(EtcdAccessTest, MutualTlsWithTheClientsCertificateAndNoneWithout) {
  if (testing::OpensslPath().empty()) GTEST_SKIP() << "no openssl program";
  absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir_);
  ASSERT_TRUE(pki.ok()) << pki.status();
  // etcd's certificate serves and, for its own calls to itself, is a client.
  ASSERT_TRUE(testing::internal::MakeCert(dir_, "etcd", "etcd", "both_ext", pki->ca_cert,
                                          pki->ca_key)
                  .ok());
  testing::EtcdCluster::Tls tls{dir_ + "/etcd.crt", dir_ + "/etcd.key", pki->ca_cert,
                                pki->client_cert,   pki->client_key,    pki->ca_cert};
  etcd_ = std::make_unique<testing::EtcdCluster>(dir_, marker_, 1, tls);
  ASSERT_NO_FATAL_FAILURE(etcd_->Start());
  EtcdOptions o;
  o.endpoints = {etcd_->endpoints()};
  o.timeout = absl::Seconds(3);
  o.tls.ca = pki->ca_cert;
  o.tls.cert = pki->client_cert;
  o.tls.key = pki->client_key;
  absl::Status st = UseStore(o);
  EXPECT_TRUE(st.ok()) << st;

  // A certificate of another CA is refused by etcd.
  o.tls.cert = pki->other_client_cert;
  o.tls.key = pki->other_client_key;
  st = UseStore(o);
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
}

}  // namespace
}  // namespace elastrun::rendezvous
