// What in-process ranks promise beyond the conformance body: failures and deadlocks end the world instead of
// hanging it, barriers really separate phases, and reductions do not depend on thread timing.
#include "distributed/comm/inproc_world.hpp"

#include "distributed/comm/inproc_state.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
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


// A rank overwrites its send buffer the moment a collective returns, for many rounds in a row, while peers on a
// busy machine may still be reading. Small sends are copied at arrive (two slots, by call parity), large ones are
// read in place behind a second rendezvous; in both, every rank must see each peer's data of that very round.
// Rank r sends counts[r] elements to every peer, so a mixed round (one large sender) takes the second
// rendezvous on every rank.
int rounds_with_stale_data(int size, const std::vector<std::int64_t>& counts, int rounds) {
  std::atomic<int> stale{0};
  InprocWorld(size).run([&](Communicator& comm) {
    const int me = comm.rank();
    std::vector<std::int64_t> send_counts(std::size_t(size), counts[std::size_t(me)]);
    std::vector<std::int64_t> recv_counts(counts.begin(), counts.end());
    std::vector<double> send(std::size_t(counts[std::size_t(me)] * size));
    std::vector<double> recv(std::size_t(std::accumulate(counts.begin(), counts.end(), std::int64_t(0))));
    for (int k = 0; k < rounds; ++k) {
      std::fill(send.begin(), send.end(), double(me * 1'000'000 + k));
      comm.alltoallv<double>(send, send_counts, recv, recv_counts);
      std::size_t at = 0;
      bool ok = true;
      for (int j = 0; j < size; ++j)
        for (std::int64_t i = 0; i < counts[std::size_t(j)]; ++i) ok = ok && recv[at++] == double(j * 1'000'000 + k);
      if (!ok) ++stale;
    }
  });
  return stale;
}

TEST(InprocWorld, ASmallSendBufferIsFreeAsSoonAsTheCollectiveReturns) {
  EXPECT_EQ(rounds_with_stale_data(4, {64, 64, 64, 64}, 3000), 0);
}

TEST(InprocWorld, ALargeSendBufferIsReadInPlaceBeforeAnyRankLeaves) {
  const std::int64_t large = std::int64_t(inproc::Group::kStageBytes / sizeof(double)) / 4 + 1;  // over the limit
  EXPECT_EQ(rounds_with_stale_data(4, {large, large, large, large}, 200), 0);
  EXPECT_EQ(rounds_with_stale_data(4, {large, 8, 8, 8}, 300), 0);  // one large sender: everyone waits for readers
}

// An in-place allreduce writes its result into the buffer peers read from: small or large, every rank's result
// is the sum of what all ranks held before.
TEST(InprocWorld, InPlaceReductionsOfAnySizeReadTheInputsOfTheirRound) {
  for (std::size_t n : {std::size_t(16), inproc::Group::kStageBytes / sizeof(double) + 1}) {
    std::atomic<int> wrong{0};
    InprocWorld(4).run([&](Communicator& comm) {
      std::vector<double> x(n);
      for (int k = 0; k < 50; ++k) {
        std::fill(x.begin(), x.end(), double(comm.rank() + k));
        comm.allreduce<double>(std::span(x), ReduceOp::sum);
        for (double v : x) wrong += v != double(0 + 1 + 2 + 3 + 4 * k);
      }
    });
    EXPECT_EQ(wrong, 0) << n << " elements";
  }
}

}  // namespace
}  // namespace moe
