// How `check --backend nccl` gives each rank its GPU (host-side planning, on the CPU), and the host-facing staged
// world at four ranks on one GPU (the conformance body; skips without a GPU). Joining NCCL itself is tested in
// nccl_communicator_test.cpp, built only with NCCL.
#include "cuda/device_inproc_world.hpp"
#include "cuda/device_staged_communicator.hpp"
#include "cuda/nccl_world.hpp"
#include "cuda/cuda_error.hpp"
#include "cuda/tests/expect_conformant.hpp"
#include "cuda/tests/gpu_test.hpp"
#include "distributed/comm/inproc_world.hpp"

#include <mutex>

namespace moe::cuda {
namespace {

using testing::expect_conformant;

// Runs fn, which must throw std::invalid_argument saying `words`.
template <typename F>
void expect_refusal(F fn, const std::string& words) {
  try {
    fn();
    ADD_FAILURE() << "not refused; expected: " << words;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(NcclWorld, LocalRankCountsTheLowerRanksOnTheSameHost) {
  const std::vector<std::int64_t> hosts{7, 7, 9, 7, 9, 4};
  EXPECT_EQ(local_ranks(hosts), (std::vector<int>{0, 1, 0, 2, 1, 0}));
  EXPECT_TRUE(local_ranks({}).empty());
}

TEST(NcclWorld, EachRankOnAHostTakesItsOwnGpu) {
  EXPECT_EQ(device_for_rank(0, 4, 8, "h"), 0);
  EXPECT_EQ(device_for_rank(3, 4, 8, "h"), 3);
  EXPECT_EQ(device_for_rank(0, 1, 1, "h"), 0);
  // One visible GPU per rank (CUDA_VISIBLE_DEVICES by the launcher): each takes its device 0.
  EXPECT_EQ(device_for_rank(2, 4, 1, "h"), 0);
}

TEST(NcclWorld, MoreRanksThanGpusOrNoGpuIsRefused) {
  expect_refusal([] { device_for_rank(2, 3, 2, "node7"); }, "3 ranks on host node7, which has 2 visible GPU(s)");
  expect_refusal([] { device_for_rank(0, 1, 0, "node7"); }, "host node7 has no visible CUDA device");
}

TEST(NcclWorld, WithoutAGpuJoiningIsRefusedOnEveryRank) {
  if (visible_device_count() > 0) GTEST_SKIP() << "skipped: a GPU is present (the joining itself is tested below)";
  std::mutex mu;
  int refused = 0;
  InprocWorld(2, RankExecution::threads).run([&](Communicator& comm) {
    try {
      join_nccl_world(comm);
    } catch (const std::invalid_argument& e) {
      std::lock_guard lock(mu);
      refused += std::string(e.what()).find("no visible CUDA device") != std::string::npos;
    }
  });
  EXPECT_EQ(refused, 2);
}

// Four ranks on one GPU: the staging in both directions (host → device collectives of the host-staged in-process
// ranks → host) with splits, subgroups and point-to-point at world size 4, which NCCL alone cannot give one GPU.
TEST(CudaDeviceStagedCommunicator, FourRanksOverHostStagedRanksPassTheConformanceBody) {
  MOE_REQUIRE_GPU();
  InprocWorld(4, RankExecution::threads).run([&](Communicator& host) {
    MOE_CUDA_CHECK(cudaSetDevice(0));
    auto device_side = std::make_unique<HostStagedCommunicator>(host, 0);
    DeviceStagedCommunicator staged(std::move(device_side), host, 0);
    expect_conformant(staged, "staged over host-staged, rank " + std::to_string(host.rank()));
  });
}

}  // namespace
}  // namespace moe::cuda
