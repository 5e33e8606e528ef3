// The conformance body on in-process worlds of 1, 2, 3, 4 and 8 ranks, as fibers and as threads, and proof that it
// catches seeded faults.
#include "distributed/comm/inproc_world.hpp"
#include "distributed/tests/conformance.hpp"
#include "distributed/tests/faulty_communicator.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moe::conformance {
namespace {

// Tallies summed over ranks and the first rank's error, in case order; with a fault, every rank runs through a
// FaultyCommunicator.
std::vector<CaseResult> run_world(int size, std::optional<Fault> fault = std::nullopt, std::string_view prefix = {},
                                  RankExecution execution = RankExecution::fibers) {
  std::vector<std::vector<CaseResult>> per_rank(static_cast<std::size_t>(size));
  InprocWorld(size, execution).run([&](Communicator& comm) {
    auto& results = per_rank[std::size_t(comm.rank())];
    if (!fault) {
      results = run_conformance(comm, prefix);
      return;
    }
    FaultyCommunicator faulty(comm, *fault);
    results = run_conformance(faulty, prefix);
  });
  std::vector<CaseResult> totals = per_rank[0];
  for (std::size_t c = 0; c < totals.size(); ++c) {
    for (std::size_t r = 1; r < per_rank.size(); ++r) {
      totals[c].tally += per_rank[r].at(c).tally;
      if (totals[c].error.empty()) totals[c].error = per_rank[r][c].error;
    }
  }
  return totals;
}

class InprocConformance : public ::testing::TestWithParam<int> {};

TEST_P(InprocConformance, EveryCasePasses) {
  for (RankExecution execution : {RankExecution::fibers, RankExecution::threads}) {
    const auto totals = run_world(GetParam(), std::nullopt, {}, execution);
    ASSERT_FALSE(totals.empty());
    const char* as = execution == RankExecution::fibers ? " (fibers)" : " (threads)";
    for (const CaseResult& c : totals) {
      EXPECT_GT(c.tally.checked, 0) << c.name << as << " checks nothing";
      EXPECT_EQ(c.tally.wrong, 0) << c.name << as << ": #wrong " << c.tally.wrong << " of " << c.tally.checked << " "
                                  << c.error;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, InprocConformance, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return "ranks" + std::to_string(param.param);
                         });

// The one-rank world made without InprocWorld::run (the bootstrap of check --backend nccl without MPI).
TEST(InprocConformanceOfASingleRank, EveryCasePassesOnTheCallingThread) {
  auto comm = single_rank_communicator();
  ASSERT_EQ(comm->size(), 1);
  const auto results = run_conformance(*comm);
  ASSERT_FALSE(results.empty());
  for (const CaseResult& c : results) {
    EXPECT_GT(c.tally.checked, 0) << c.name << " checks nothing";
    EXPECT_EQ(c.tally.wrong, 0) << c.name << ": #wrong " << c.tally.wrong << " of " << c.tally.checked << " "
                                << c.error;
  }
}

// Runs the cases named `prefix`* on 4 ranks with one seeded fault: each of them must notice it. (Only those:
// a fault in a collective that another case uses internally can send ranks down different paths.)
void expect_caught(Fault fault, const std::string& prefix) {
  const auto results = run_world(4, fault, prefix);
  EXPECT_FALSE(results.empty()) << "no case starts with " << prefix;
  for (const CaseResult& c : results) EXPECT_GT(c.tally.wrong, 0) << c.name << " misses the seeded fault";
}

TEST(ConformanceCatches, CorruptOutputOfEveryCollective) {
  for (CollectiveKind kind :
       {CollectiveKind::broadcast, CollectiveKind::allreduce, CollectiveKind::allgather, CollectiveKind::allgatherv,
        CollectiveKind::reduce_scatter, CollectiveKind::reduce_scatterv, CollectiveKind::alltoallv}) {
    SCOPED_TRACE(std::string(collective_name(kind)));
    expect_caught({Fault::Kind::corrupt_output, kind}, std::string(collective_name(kind)) + ".");
  }
  // alltoallv_indexed over a backend without an override is pack, alltoallv, land.
  expect_caught({Fault::Kind::corrupt_output, CollectiveKind::alltoallv}, "alltoallv_indexed.");
}

// Sums taken in another order than (source rank, position) change low bits of the floating-point cases.
TEST(ConformanceCatches, IndexedAddsOutOfOrder) {
  expect_caught({Fault::Kind::reversed_adds}, "alltoallv_indexed.add.f64");
  expect_caught({Fault::Kind::reversed_adds}, "alltoallv_indexed.add.f32");
}

// The Communicator's default alltoallv_indexed (what MPI runs), in process: through the wrapper with a fault that
// these cases never meet.
TEST(InprocConformanceOfTheDefault, IndexedExchangePasses) {
  const auto results = run_world(4, Fault{Fault::Kind::corrupt_message}, "alltoallv_indexed.");
  ASSERT_FALSE(results.empty());
  for (const CaseResult& c : results) EXPECT_EQ(c.tally.wrong, 0) << c.name << ": " << c.error;
}

TEST(ConformanceCatches, CorruptMessages) { expect_caught({Fault::Kind::corrupt_message}, "send_recv."); }

TEST(ConformanceCatches, SplitIgnoringTheKey) {
  for (const char* name : {"split.reverse_key", "subgroup.reversed", "subgroup.rotated"}) {
    expect_caught({Fault::Kind::ignore_split_key}, name);
  }
}

TEST(ConformanceCatches, SwallowedErrors) { expect_caught({Fault::Kind::swallow_errors}, "error.calls."); }

}  // namespace
}  // namespace moe::conformance
