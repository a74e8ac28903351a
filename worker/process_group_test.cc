#include "worker/process_group.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace elastrun::worker {
namespace {

using ::testing::HasSubstr;

WorkerEnv Env(int rank, int world_size, int port) {
  WorkerEnv env;
  env.rank = env.local_rank = env.role_rank = rank;
  env.world_size = env.local_world_size = env.role_world_size = world_size;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  return env;
}

// A TCP socket bound (and, if `listen`, listening) on 127.0.0.1:0; the
// port is taken until the object dies.
class BoundSocket {
 public:
  explicit BoundSocket(bool listen) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len), 0);
    if (listen) {
      EXPECT_EQ(::listen(fd_, 1), 0);
    }
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~BoundSocket() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

ProcessGroupOptions FastOptions() {
  ProcessGroupOptions options;
  options.store_timeout = absl::Seconds(20);
  options.collective_timeout = absl::Seconds(20);
  return options;
}

// Runs `body(rank, group)` for ranks 0 and 1 on two threads, each with its
// own process group built through `store_for(rank)`; returns when both end.
template <typename StoreFor, typename Body>
void RunTwoRanks(const WorkerEnv& env0, const WorkerEnv& env1, StoreFor store_for,
                 Body body) {
  auto run = [&](const WorkerEnv& env) {
    absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store = store_for(env);
    ASSERT_TRUE(store.ok()) << store.status();
    absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
        ProcessGroup::Create(env, *store, FastOptions());
    ASSERT_TRUE(group.ok()) << group.status();
    body(env.rank, **group);
  };
  std::thread peer([&] { run(env1); });
  run(env0);
  peer.join();
}

TEST(ProcessGroupTest, TwoRanksAllReduceBroadcastAndBarrier) {
  // Rank 0 hosts the store on a free port; rank 1 learns it from rank 0's
  // store, as a launcher would have told it through MASTER_PORT.
  WorkerEnv env0 = Env(0, 2, 0);
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> server =
      ConnectStore(env0, FastOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->getPort();
  ASSERT_GT(port, 0);
  env0.master_port = port;
  WorkerEnv env1 = Env(1, 2, port);

  RunTwoRanks(
      env0, env1,
      [&](const WorkerEnv& env) -> absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> {
        if (env.rank == 0) return *server;
        return ConnectStore(env, FastOptions());
      },
      [](int rank, ProcessGroup& group) {
        EXPECT_EQ(group.rank(), rank);
        EXPECT_EQ(group.world_size(), 2);
        at::Tensor t = at::full({4}, static_cast<double>(rank + 1), at::kFloat);
        ASSERT_TRUE(group.AllReduce(t).ok());
        EXPECT_TRUE(at::equal(t, at::full({4}, 3.0, at::kFloat)));

        at::Tensor b = at::full({2}, rank == 1 ? 7.0 : 0.0, at::kLong);
        ASSERT_TRUE(group.Broadcast(b, 1).ok());
        EXPECT_EQ(b[0].item<int64_t>(), 7);
        EXPECT_FALSE(group.Broadcast(b, 2).ok());

        for (int i = 0; i < 3; ++i) ASSERT_TRUE(group.Barrier().ok());
      });
}

TEST(ProcessGroupTest, AgentStoreMakesEveryRankAClient) {
  // Stand-in for the launcher's store.
  c10d::TCPStoreOptions opts;
  opts.port = 0;
  opts.isServer = true;
  opts.waitWorkers = false;
  auto agent = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", opts);
  WorkerEnv env0 = Env(0, 2, agent->getPort());
  WorkerEnv env1 = Env(1, 2, agent->getPort());
  env0.use_agent_store = env1.use_agent_store = true;
  env0.restart_count = env1.restart_count = 2;

  std::thread peer([&] {
    absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
        ProcessGroup::Create(env1, FastOptions());
    ASSERT_TRUE(group.ok()) << group.status();
    at::Tensor t = at::ones({1});
    EXPECT_TRUE((*group)->AllReduce(t).ok());
    EXPECT_EQ(t.item<float>(), 2.0f);
  });
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Create(env0, FastOptions());
  ASSERT_TRUE(group.ok()) << group.status();
  at::Tensor t = at::ones({1});
  EXPECT_TRUE((*group)->AllReduce(t).ok());
  EXPECT_EQ(t.item<float>(), 2.0f);
  peer.join();
  // The group met in the launcher's store. (Had rank 0 tried to host one on
  // that port, it would have failed to bind.)
  EXPECT_GT(agent->getNumKeys(), 0);
}

TEST(ProcessGroupTest, UnreachableStoreNamesTheAddress) {
  int port = 0;
  {
    BoundSocket closed(/*listen=*/false);  // Nothing will listen here.
    port = closed.port();
  }
  ProcessGroupOptions options;
  options.store_timeout = absl::Seconds(1);
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
      ConnectStore(Env(1, 2, port), options);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("rank 1 cannot reach the c10d store at 127.0.0.1:" +
                        std::to_string(port) + " within 1s"));
}

TEST(ProcessGroupTest, PortInUseNamesTheAddress) {
  BoundSocket taken(/*listen=*/true);
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
      ConnectStore(Env(0, 2, taken.port()), FastOptions());
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("rank 0 cannot host the c10d store at 127.0.0.1:" +
                        std::to_string(taken.port())));
}

TEST(ProcessGroupTest, MissingPeerTimesOut) {
  WorkerEnv env0 = Env(0, 2, 0);
  ProcessGroupOptions options;
  options.store_timeout = absl::Seconds(1);
  options.collective_timeout = absl::Seconds(1);
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store = ConnectStore(env0, options);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Create(env0, *store, options);
  ASSERT_FALSE(group.ok());
  EXPECT_THAT(std::string(group.status().message()),
              HasSubstr("rank 0 of 2 could not form the Gloo process group"));
  EXPECT_THAT(std::string(group.status().message()), HasSubstr("within 1s"));
}

// A two-rank group on a store that rank 0 hosts on a free port.
template <typename Body>
void RunTwoRanksOnFreePort(Body body) {
  WorkerEnv env0 = Env(0, 2, 0);
  absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> server =
      ConnectStore(env0, FastOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  env0.master_port = (*server)->getPort();
  RunTwoRanks(
      env0, Env(1, 2, env0.master_port),
      [&](const WorkerEnv& env) -> absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> {
        if (env.rank == 0) return *server;
        return ConnectStore(env, FastOptions());
      },
      body);
}

// ForDevice(CPU) is what DDP's Reducer and broadcast_coalesced get: a
// c10d::ProcessGroup whose collectives reach the other rank.
TEST(ProcessGroupTest, ForDeviceCpuIsAWorkingProcessGroup) {
  RunTwoRanksOnFreePort([](int rank, ProcessGroup& group) {
    absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> cpu =
        group.ForDevice(c10::DeviceType::CPU);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    EXPECT_EQ((*cpu)->getRank(), rank);
    EXPECT_EQ((*cpu)->getSize(), 2);
    std::vector<at::Tensor> tensors = {at::full({3}, static_cast<double>(10 * (rank + 1)))};
    (*cpu)->allreduce(tensors)->wait();
    EXPECT_TRUE(at::equal(tensors[0], at::full({3}, 30.0)));
    // The same group again, not a new one per call.
    EXPECT_EQ(group.ForDevice(c10::DeviceType::CPU)->get(), cpu->get());
    // Neither a GPU nor another device type has a group here.
    EXPECT_EQ(group.cuda_device(), -1);
    EXPECT_EQ(group.ForDevice(c10::DeviceType::CUDA).status().code(),
              absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(group.ForDevice(c10::DeviceType::Meta).status().code(),
              absl::StatusCode::kInvalidArgument);
  });
}

#if !ELASTRUN_WITH_CUDA
TEST(ProcessGroupTest, BuildWithoutCudaRefusesAGpu) {
  RunTwoRanksOnFreePort([](int rank, ProcessGroup& group) {
    absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> cuda =
        group.ForDevice(c10::DeviceType::CUDA);
    EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(cuda.status().message()),
                HasSubstr("this build has no CUDA (ELASTRUN_WITH_CUDA off)"));
  });

  // Refused before connecting to anything: nobody hosts this store.
  int port = 0;
  {
    BoundSocket closed(/*listen=*/false);
    port = closed.port();
  }
  ProcessGroupOptions options = FastOptions();
  options.cuda_device = 0;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Create(Env(1, 2, port), options);
  ASSERT_FALSE(group.ok());
  EXPECT_EQ(group.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(group.status().message(),
            "this build has no CUDA (ELASTRUN_WITH_CUDA off): cannot use cuda:0");
}
#else
// A GPU build: a one-rank NCCL group (NCCL wants one GPU per rank, so two
// ranks in one process would need two GPUs).
TEST(ProcessGroupTest, CudaDeviceBuildsAnNcclGroup) {
  if (at::getNumGPUs() == 0) GTEST_SKIP() << "skipped: no GPU visible";
  ProcessGroupOptions options = FastOptions();
  options.cuda_device = static_cast<int>(at::getNumGPUs());
  absl::StatusOr<std::unique_ptr<ProcessGroup>> missing =
      ProcessGroup::Create(Env(0, 1, 0), options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);

  options.cuda_device = 0;
  absl::StatusOr<std::unique_ptr<ProcessGroup>> group =
      ProcessGroup::Create(Env(0, 1, 0), options);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_EQ((*group)->cuda_device(), 0);
  at::Tensor t = at::full({4}, 2.0, at::TensorOptions().device(at::kCUDA, 0));
  ASSERT_TRUE((*group)->AllReduce(t).ok());
  ASSERT_TRUE((*group)->Broadcast(t, 0).ok());
  EXPECT_TRUE(at::equal(t.cpu(), at::full({4}, 2.0)));
  absl::StatusOr<c10::intrusive_ptr<c10d::ProcessGroup>> cuda =
      (*group)->ForDevice(c10::DeviceType::CUDA);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  std::vector<at::Tensor> tensors = {t};
  (*cuda)->allreduce(tensors)->wait();
  EXPECT_TRUE(at::equal(t.cpu(), at::full({4}, 2.0)));
  ASSERT_TRUE((*group)->Barrier().ok());
}
#endif

}  // namespace
}  // namespace elastrun::worker
