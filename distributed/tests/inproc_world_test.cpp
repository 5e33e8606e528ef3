// What in-process ranks promise beyond the conformance body, as fibers and as threads: failures and deadlocks end
// the world instead of hanging it, barriers really separate phases, and reductions do not depend on timing. And
// what fibers must carry across a switch: each rank's own exception being handled and floating-point modes; and
// what a world's memory estimate counts.
#include "distributed/comm/inproc_world.hpp"

#include "distributed/comm/inproc_state.hpp"
#include "distributed/train/rank_groups.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <chrono>
#include <cfenv>
#include <cstring>
#include <numeric>
#include <ostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace moe {
namespace {

using namespace std::chrono_literals;

}  // namespace

void PrintTo(RankExecution execution, std::ostream* out) {
  *out << (execution == RankExecution::fibers ? "fibers" : "threads");
}

namespace {

struct RankFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Runs fn on `size` ranks and returns the message of the exception run() throws as E (fails if none).
template <typename E>
std::string message_of(RankExecution execution, int size, const std::function<void(Communicator&)>& fn) {
  try {
    InprocWorld(size, execution).run(fn);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "run() returned without the expected exception";
  return {};
}

TEST(InprocWorld, RejectsAnEmptyWorld) { EXPECT_THROW(InprocWorld(0), std::invalid_argument); }
TEST(InprocWorld, RejectsMoreRanksThanItCanRun) {
  EXPECT_NO_THROW(InprocWorld(InprocWorld::kMaxRanks));
  EXPECT_THROW(InprocWorld(InprocWorld::kMaxRanks + 1), std::invalid_argument);
}

// Issue 55: a world's memory estimate counts its ranks: building a group, each rank holds its member list and the
// members its split made (16 bytes × group), world · group in all (not the 8 · world³ bytes, 8.6 GB at 1024 ranks,
// of gathering every list on every rank); a world past kMaxRanks is refused as making it would be.
TEST(InprocWorld, AWorldsEstimateCountsTheGroupGathers) {
  ParallelLayout layout;
  layout.world = InprocWorld::kMaxRanks;  // dp = world: the dp and tp_dp_cp groups span it
  const std::uint64_t gathers = dist::rank_groups_bytes(ProcessGroups(layout));
  const std::uint64_t world = InprocWorld::kMaxRanks;
  EXPECT_EQ(gathers, world * (16 * world + 48));
  EXPECT_EQ(dist::inproc_world_bytes(ProcessGroups(layout)), gathers + InprocWorld::kMaxRanks * InprocWorld::kRankBytes);
  layout.world = 8;
  EXPECT_EQ(dist::rank_groups_bytes(ProcessGroups(layout)), 8u * (16 * 8 + 48));
  layout.pp = 8;  // every group but pp is one rank; pp spans the world
  EXPECT_EQ(dist::rank_groups_bytes(ProcessGroups(layout)), 8u * (16 * 8 + 48));
  layout = ParallelLayout{};
  layout.world = InprocWorld::kMaxRanks + 1;
  EXPECT_THROW(dist::inproc_world_bytes(ProcessGroups(layout)), std::invalid_argument);
}

class InprocRanks : public ::testing::TestWithParam<RankExecution> {};

TEST_P(InprocRanks, RethrowsTheFailingRanksExceptionWhileOthersWaitInACollective) {
  const std::string what = message_of<RankFailure>(GetParam(), 4, [](Communicator& comm) {
    if (comm.rank() == 2) throw RankFailure("rank 2 gave up");
    comm.barrier();
  });
  EXPECT_EQ(what, "rank 2 gave up");
}

TEST_P(InprocRanks, AbortsRanksWaitingInRecvAndInSubCommunicators) {
  const std::string what = message_of<RankFailure>(GetParam(), 4, [](Communicator& comm) {
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

TEST_P(InprocRanks, ReportsADeadlockOfTwoReceives) {
  const std::string what = message_of<WorldAborted>(GetParam(), 2, [](Communicator& comm) {
    std::vector<float> in(1);
    comm.recv<float>(in, 1 - comm.rank(), 7);
  });
  EXPECT_NE(what.find("deadlock"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 0 waits in recv from rank 1 tag 7 on world"), std::string::npos) << what;
}

TEST_P(InprocRanks, ReportsARankThatReturnedWhileOthersWait) {
  const std::string what = message_of<WorldAborted>(GetParam(), 3, [](Communicator& comm) {
    if (comm.rank() != 2) comm.barrier();
  });
  EXPECT_NE(what.find("rank 2 has returned"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 0 waits in barrier on world"), std::string::npos) << what;
}

TEST_P(InprocRanks, AnUncaughtCollectiveMismatchReachesTheCaller) {
  const std::string what = message_of<std::invalid_argument>(GetParam(), 2, [](Communicator& comm) {
    if (comm.rank() == 0)
      comm.barrier();
    else
      comm.split(0, 0);
  });
  EXPECT_NE(what.find("collective mismatch"), std::string::npos) << what;
}

// Ranks arrive late by different amounts; nobody may see a count below size() after the barrier.
TEST_P(InprocRanks, BarrierSeparatesPhases) {
  constexpr int size = 4, rounds = 10;
  std::vector<std::atomic<int>> arrived(rounds);
  std::atomic<int> early{0};
  InprocWorld(size, GetParam()).run([&](Communicator& comm) {
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
TEST_P(InprocRanks, ReductionsDoNotDependOnTiming) {
  constexpr int size = 5;
  constexpr std::size_t n = 513;
  std::vector<std::vector<double>> results;
  for (int trial = 0; trial < 4; ++trial) {
    std::vector<double> result(n);
    InprocWorld(size, GetParam()).run([&](Communicator& comm) {
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
int rounds_with_stale_data(RankExecution execution, int size, const std::vector<std::int64_t>& counts, int rounds) {
  std::atomic<int> stale{0};
  InprocWorld(size, execution).run([&](Communicator& comm) {
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

TEST_P(InprocRanks, ASmallSendBufferIsFreeAsSoonAsTheCollectiveReturns) {
  EXPECT_EQ(rounds_with_stale_data(GetParam(), 4, {64, 64, 64, 64}, 3000), 0);
}

TEST_P(InprocRanks, ALargeSendBufferIsReadInPlaceBeforeAnyRankLeaves) {
  const std::int64_t large = std::int64_t(inproc::Group::kStageBytes / sizeof(double)) / 4 + 1;  // over the limit
  EXPECT_EQ(rounds_with_stale_data(GetParam(), 4, {large, large, large, large}, 200), 0);
  // One large sender: everyone waits for readers.
  EXPECT_EQ(rounds_with_stale_data(GetParam(), 4, {large, 8, 8, 8}, 300), 0);
}

// An in-place allreduce writes its result into the buffer peers read from: small or large, every rank's result
// is the sum of what all ranks held before.
TEST_P(InprocRanks, InPlaceReductionsOfAnySizeReadTheInputsOfTheirRound) {
  for (std::size_t n : {std::size_t(16), inproc::Group::kStageBytes / sizeof(double) + 1}) {
    std::atomic<int> wrong{0};
    InprocWorld(4, GetParam()).run([&](Communicator& comm) {
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

// A rank that waits in a collective inside a catch block, while the ranks that run meanwhile throw and catch their
// own exceptions, must find its own exception when it rethrows: the C++ runtime keeps the exceptions being
// handled per thread, and every fiber of a world shares the thread.
TEST_P(InprocRanks, ARankWaitingInsideACatchBlockKeepsItsOwnException) {
  std::vector<std::string> rethrown(4);
  InprocWorld(4, GetParam()).run([&](Communicator& comm) {
    const std::string mine = "rank " + std::to_string(comm.rank());
    for (int round = 0; round < 3; ++round) {
      try {
        try {
          throw RankFailure(mine);
        } catch (const RankFailure&) {
          comm.barrier();  // the others throw, catch and reach this barrier meanwhile
          throw;
        }
      } catch (const RankFailure& e) {
        rethrown[std::size_t(comm.rank())] = e.what();
      }
      EXPECT_EQ(std::uncaught_exceptions(), 0);
    }
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(rethrown[std::size_t(r)], "rank " + std::to_string(r));
}

TEST_P(InprocRanks, FibersShareTheCallersThreadAndThreadsDoNot) {
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::thread::id> ids(4);
  InprocWorld(4, GetParam()).run([&](Communicator& comm) {
    comm.barrier();
    ids[std::size_t(comm.rank())] = std::this_thread::get_id();
  });
  for (const auto& id : ids) EXPECT_EQ(id == caller, GetParam() == RankExecution::fibers);
}

// The floating-point modes are a thread's, and so each fiber's: a rank that rounds upward while the others round
// their own ways keeps its mode across every switch (x87 control word: fegetround; MXCSR: the SSE division), and
// the caller's thread gets its own mode back.
TEST_P(InprocRanks, ARankKeepsItsOwnRoundingMode) {
  const int modes[4] = {FE_TONEAREST, FE_UPWARD, FE_DOWNWARD, FE_TOWARDZERO};
  volatile double one = 1.0, three = 3.0;
  double expected[4];
  for (int r = 0; r < 4; ++r) {
    std::fesetround(modes[r]);
    expected[r] = one / three;
  }
  std::fesetround(FE_TONEAREST);
  ASSERT_NE(expected[1], expected[2]);  // the modes tell apart
  std::vector<int> wrong(4, 0);
  InprocWorld(4, GetParam()).run([&](Communicator& comm) {
    const int r = comm.rank();
    std::fesetround(modes[r]);
    for (int round = 0; round < 3; ++round) {
      comm.barrier();  // the others set their modes meanwhile
      wrong[std::size_t(r)] += std::fegetround() != modes[r];
      const double third = one / three;
      wrong[std::size_t(r)] += std::memcmp(&third, &expected[r], sizeof third) != 0;
    }
  });
  EXPECT_EQ(std::fegetround(), FE_TONEAREST);
  const double third = one / three;
  EXPECT_EQ(std::memcmp(&third, &expected[0], sizeof third), 0);
  std::fesetround(FE_TONEAREST);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(wrong[std::size_t(r)], 0) << "rank " << r;
}

// A rank may use as much stack as a thread's default allows, less a margin: 6 MiB of locals in one frame chain.
TEST_P(InprocRanks, ARankHasAThreadsStack) {
  std::vector<double> sums(2);
  InprocWorld(2, GetParam()).run([&](Communicator& comm) {
    std::function<double(int)> deep = [&](int depth) -> double {
      volatile char frame[64 * 1024];
      frame[0] = char(depth);
      const double below = depth == 0 ? 0.0 : deep(depth - 1);
      return below + double(frame[0]);
    };
    comm.barrier();
    sums[std::size_t(comm.rank())] = deep(96);
  });
  EXPECT_EQ(sums[0], 96.0 * 97.0 / 2.0);
  EXPECT_EQ(sums[1], sums[0]);
}

TEST(InprocWorld, TheDefaultComesFromTheEnvironment) {
  const char* saved = std::getenv("MOE_INPROC_RANKS");
  const std::string before = saved ? saved : "";
  ::setenv("MOE_INPROC_RANKS", "threads", 1);
  EXPECT_EQ(default_rank_execution(), RankExecution::threads);
  ::setenv("MOE_INPROC_RANKS", "fibers", 1);
  EXPECT_EQ(default_rank_execution(), RankExecution::fibers);
  ::setenv("MOE_INPROC_RANKS", "processes", 1);
  EXPECT_THROW(default_rank_execution(), std::invalid_argument);
  ::unsetenv("MOE_INPROC_RANKS");
  EXPECT_EQ(default_rank_execution(), RankExecution::fibers);
  if (saved) ::setenv("MOE_INPROC_RANKS", before.c_str(), 1);
}

INSTANTIATE_TEST_SUITE_P(Execution, InprocRanks, ::testing::Values(RankExecution::fibers, RankExecution::threads),
                         [](const ::testing::TestParamInfo<RankExecution>& param) {
                           return param.param == RankExecution::fibers ? "fibers" : "threads";
                         });

}  // namespace
}  // namespace moe
