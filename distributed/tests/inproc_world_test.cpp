// What in-process ranks promise beyond the conformance body: failures and deadlocks end the world instead of
// hanging it, barriers really separate phases, and reductions do not depend on thread timing.
#include "distributed/comm/inproc_world.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace moe {
namespace {

using namespace std::chrono_literals;

struct RankFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs fn on `size` ranks and returns the message of the exception run() throws as E (fails if none).
template <typename E>
std::string message_of(int size, const std::function<void(Communicator&)>& fn) {
  try {
    InprocWorld(size).run(fn);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "run() returned without the expected exception";
  return {};
}

TEST(InprocWorld, RejectsAnEmptyWorld) { EXPECT_THROW(InprocWorld(0), std::invalid_argument); }
TEST(InprocWorld, RejectsMoreRanksThanThreadsItCanRun) {
  EXPECT_NO_THROW(InprocWorld(InprocWorld::kMaxRanks));
  EXPECT_THROW(InprocWorld(InprocWorld::kMaxRanks + 1), std::invalid_argument);
}

TEST(InprocWorld, RethrowsTheFailingRanksExceptionWhileOthersWaitInACollective) {
  const std::string what = message_of<RankFailure>(4, [](Communicator& comm) {
    if (comm.rank() == 2) throw RankFailure("rank 2 gave up");
    comm.barrier();
  });
  EXPECT_EQ(what, "rank 2 gave up");
}

TEST(InprocWorld, AbortsRanksWaitingInRecvAndInSubCommunicators) {
  const std::string what = message_of<RankFailure>(4, [](Communicator& comm) {
    if (comm.rank() == 0) {
      std::this_thread::sleep_for(10ms);  // let the others block first
      throw RankFailure("rank 0 failed");
    }
    if (comm.rank() == 1) {
      std::vector<double> in(1);
      comm.recv<double>(in, 0, 0);
    }
    auto pair = comm.split(comm.rank() / 2, 0);
    pair->barrier();
  });
  EXPECT_EQ(what, "rank 0 failed");
}

TEST(InprocWorld, ReportsADeadlockOfTwoReceives) {
  const std::string what = message_of<WorldAborted>(2, [](Communicator& comm) {
    std::vector<float> in(1);
    comm.recv<float>(in, 1 - comm.rank(), 7);
  });
  EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 0 waits in recv from rank 1 tag 7 on world"), std::string::npos) << what;
}

TEST(InprocWorld, ReportsARankThatReturnedWhileOthersWait) {
  const std::string what = message_of<WorldAborted>(3, [](Communicator& comm) {
    if (comm.rank() != 2) comm.barrier();
  });
  EXPECT_NE(what.find("rank 2 has returned"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 0 waits in barrier on world"), std::string::npos) << what;
}

TEST(InprocWorld, AnUncaughtCollectiveMismatchReachesTheCaller) {
  const std::string what = message_of<std::invalid_argument>(2, [](Communicator& comm) {
    if (comm.rank() == 0)
      comm.barrier();
    else
      comm.split(0, 0);
  });
  EXPECT_NE(what.find("collective mismatch"), std::string::npos) << what;
}

// Ranks arrive late by different amounts; nobody may see a count below size() after the barrier.
TEST(InprocWorld, BarrierSeparatesPhases) {
  constexpr int size = 4, rounds = 10;
  std::vector<std::atomic<int>> arrived(rounds);
  std::atomic<int> early{0};
  InprocWorld(size).run([&](Communicator& comm) {
    for (int k = 0; k < rounds; ++k) {
      std::this_thread::sleep_for(std::chrono::microseconds(200 * ((comm.rank() + k) % size)));
      ++arrived[std::size_t(k)];
      comm.barrier();
      if (arrived[std::size_t(k)] != size) ++early;
    }
  });
  EXPECT_EQ(early, 0);
}

// The same reduction under different arrival orders gives the same bits.
TEST(InprocWorld, ReductionsDoNotDependOnTiming) {
  constexpr int size = 5;
  constexpr std::size_t n = 513;
  std::vector<std::vector<double>> results;
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<double> result(n);
    InprocWorld(size).run([&](Communicator& comm) {
      std::this_thread::sleep_for(std::chrono::microseconds(300 * ((comm.rank() * 3 + trial) % size)));
      std::vector<double> x(n);
      for (std::size_t i = 0; i < n; ++i)
        x[i] = 1.0 / double(7 + i + std::size_t(comm.rank()) * 13) * (comm.rank() % 2 ? -1e6 : 1.0);
      comm.allreduce<double>(std::span(x), ReduceOp::sum);
      if (comm.rank() == 0) result = x;
    });
    results.push_back(result);
  }
  for (const auto& r : results) EXPECT_EQ(std::memcmp(r.data(), results[0].data(), n * sizeof(double)), 0);
}

}  // namespace
}  // namespace moe
