// require_same_options (distributed/comm/option_agreement.hpp): ranks started with the same options pass; any
// difference — another value, an option only some ranks gave — is refused with the same message on every rank,
// naming the option and the ranks. The end-to-end cases under mpirun are in tools/tests/mpi_errors.sh.
#include "distributed/comm/inproc_world.hpp"
#include "distributed/comm/option_agreement.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

// The message every rank got (empty: agreed), with the options of rank r given by `of`.
std::set<std::string> outcome(int ranks, const std::function<std::vector<GivenOption>(int)>& of) {
  std::set<std::string> messages;
  std::mutex mu;
  InprocWorld(ranks).run([&](Communicator& world) {
    std::string what;
    try {
      require_same_options(world, of(world.rank()));
    } catch (const std::invalid_argument& e) {
      what = e.what();
    }
    std::lock_guard lock(mu);
    messages.insert(what);
  });
  return messages;
}

TEST(OptionAgreement, TheSameOptionsPass) {
  const std::vector<GivenOption> same{{"--backend", "mpi"}, {"--steps", "2"}, {"--json", ""}};
  EXPECT_EQ(outcome(4, [&](int) { return same; }), std::set<std::string>{""});
}

TEST(OptionAgreement, ADifferentValueNamesTheOptionAndTheRanks) {
  const auto messages = outcome(4, [](int r) {
    return std::vector<GivenOption>{{"--backend", "mpi"}, {"--seed", "1"}, {"--steps", r >= 2 ? "3" : "2"}};
  });
  ASSERT_EQ(messages.size(), 1u) << "every rank gets the same message";
  EXPECT_EQ(*messages.begin(), "the ranks were started with different options: --steps is 2 on rank 0 but 3 on "
                               "ranks 2, 3 (every rank of the job must get the same command line)");
}

TEST(OptionAgreement, AnOptionOnlySomeRanksGaveCounts) {
  auto messages = outcome(3, [](int r) {
    std::vector<GivenOption> o{{"--backend", "mpi"}};
    if (r == 1) o.push_back({"--preset", "tiny-v3"});
    return o;
  });
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages.begin()->find("--preset is not given on rank 0 but tiny-v3 on rank 1 "), std::string::npos)
      << *messages.begin();
  messages = outcome(2, [](int r) {
    return r == 0 ? std::vector<GivenOption>{{"--json", ""}} : std::vector<GivenOption>{};
  });
  EXPECT_NE(messages.begin()->find("--json is given on rank 0 but not given on rank 1"), std::string::npos)
      << *messages.begin();
}

}  // namespace
}  // namespace moe
