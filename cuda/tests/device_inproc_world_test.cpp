// Several in-process ranks on one GPU with device buffers (host-staged): alltoallv and allreduce with data whose
// results are exact, and a split, against what the in-process backend defines.
#include "cuda/device_inproc_world.hpp"
#include "cuda/tests/gpu_test.hpp"

namespace moe::cuda {
namespace {

using namespace testing;

TEST(CudaDeviceInprocWorld, AlltoallvAllreduceSplitAndSubgroupOnOneGpu) {
  MOE_REQUIRE_GPU();
  constexpr int world = 4;
  run_device_ranks(world, 0, [](Communicator& comm) {
    const int r = comm.rank();
    // Rank r sends j + 1 elements (value 100·r + j) to rank j.
    std::vector<std::int64_t> send_counts, recv_counts;
    std::vector<double> send;
    for (int j = 0; j < world; ++j) {
      send_counts.push_back(j + 1);
      recv_counts.push_back(r + 1);
      for (int i = 0; i <= j; ++i) send.push_back(100.0 * r + j);
    }
    const auto d_send = upload(send);
    DeviceBuffer<double> d_recv(std::size_t(world * (r + 1)));
    comm.alltoallv<double>(d_send.span(), send_counts, d_recv.span(), recv_counts);
    const auto got = d_recv.to_host();
    for (int j = 0; j < world; ++j)
      for (int i = 0; i <= r; ++i) EXPECT_EQ(got[std::size_t(j * (r + 1) + i)], 100.0 * j + r);

    auto d_sum = upload(std::vector<double>{double(r), 1.0});
    comm.allreduce<double>(d_sum.span(), ReduceOp::sum);
    EXPECT_EQ(d_sum.to_host(), (std::vector<double>{6.0, 4.0}));

    auto half = comm.split(r % 2, r);
    auto d_max = upload(std::vector<std::int32_t>{r});
    half->allreduce<std::int32_t>(d_max.span(), ReduceOp::max);
    EXPECT_EQ(d_max.to_host()[0], r % 2 == 0 ? 2 : 3);

    // subgroup takes host lists (RankGroups builds the process groups with it): pairs {0, 1} and {2, 3}.
    const std::vector<int> pair = r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    auto group = comm.subgroup(pair);
    auto d_pair_max = upload(std::vector<std::int32_t>{r});
    group->allreduce<std::int32_t>(d_pair_max.span(), ReduceOp::max);
    EXPECT_EQ(d_pair_max.to_host()[0], r < 2 ? 1 : 3);
  });
}

}  // namespace
}  // namespace moe::cuda
