// Helpers shared by the trainer's torch tests: a scratch folder per test in
// the build tree, and two ranks as two threads with their own Gloo groups.
#ifndef ELASTRUN_TRAINER_TRAINER_TEST_UTIL_H_
#define ELASTRUN_TRAINER_TRAINER_TEST_UTIL_H_

#include <filesystem>
#include <functional>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "trainer/test_files.h"
#include "worker/process_group.h"

namespace elastrun::trainer::testing {

inline worker::WorkerEnv Env(int rank, int world, int port) {
  worker::WorkerEnv env;
  env.rank = env.local_rank = env.role_rank = rank;
  env.world_size = env.local_world_size = env.role_world_size = world;
  env.master_addr = "127.0.0.1";
  env.master_port = port;
  return env;
}

inline worker::ProcessGroupOptions FastOptions() {
  worker::ProcessGroupOptions o;
  o.store_timeout = absl::Seconds(30);
  o.collective_timeout = absl::Seconds(60);
  return o;
}

// Runs body(rank, group) on two ranks, as two threads with their own Gloo
// groups over a TCPStore on a free loopback port.
inline void RunTwoRanks(const std::function<void(int, worker::ProcessGroup&)>& body) {
  worker::WorkerEnv env0 = Env(0, 2, 0);
  auto server = worker::ConnectStore(env0, FastOptions());
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->getPort();
  env0.master_port = port;
  auto run = [&](const worker::WorkerEnv& env) {
    absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>> store =
        env.rank == 0 ? absl::StatusOr<c10::intrusive_ptr<c10d::TCPStore>>(*server)
                      : worker::ConnectStore(env, FastOptions());
    ASSERT_TRUE(store.ok()) << store.status();
    auto group = worker::ProcessGroup::Create(env, *store, FastOptions());
    ASSERT_TRUE(group.ok()) << group.status();
    body(env.rank, **group);
  };
  std::thread peer([&] { run(Env(1, 2, port)); });
  run(env0);
  peer.join();
}

}  // namespace elastrun::trainer::testing

#endif  // ELASTRUN_TRAINER_TRAINER_TEST_UTIL_H_
