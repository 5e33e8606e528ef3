// NcclCommunicator at world size 1 on device buffers: every collective with exactly predictable integer-valued
// data (nccl-tests style), the call checks, and self send/recv with the header check; then the world `check
// --backend nccl` runs on (nccl_world.hpp) joined by one rank, through the whole conformance body.
#include "cuda/nccl_communicator.hpp"
#include "cuda/nccl_world.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "cuda/tests/expect_conformant.hpp"
#include "cuda/tests/gpu_test.hpp"

namespace moe::cuda {
namespace {

using namespace testing;

TEST(CudaNcclCommunicator, CollectivesAtWorldSizeOne) {
  MOE_REQUIRE_GPU();
  auto comm = NcclCommunicator::single(0);
  ASSERT_EQ(comm->size(), 1);
  ASSERT_EQ(comm->rank(), 0);

  auto data = upload(std::vector<double>{1, 2, 3, 4});
  comm->allreduce<double>(data.span(), ReduceOp::sum);
  EXPECT_EQ(data.to_host(), (std::vector<double>{1, 2, 3, 4}));
  comm->allreduce<double>(data.span(), ReduceOp::avg);
  EXPECT_EQ(data.to_host(), (std::vector<double>{1, 2, 3, 4}));

  // alltoallv with displacements: 3 elements from offset 1 land at offset 2; the rest of recv is untouched.
  const auto send = upload(std::vector<std::int64_t>{9, 10, 11, 12, 13});
  auto recv = upload(std::vector<std::int64_t>{-1, -1, -1, -1, -1, -1});
  const std::vector<std::int64_t> three{3}, one{1}, two{2};
  comm->alltoallv<std::int64_t>(send.span(), three, one, recv.span(), three, two);
  EXPECT_EQ(recv.to_host(), (std::vector<std::int64_t>{-1, -1, 10, 11, 12, -1}));

  const auto piece = upload(std::vector<float>{5, 6});
  auto gathered = upload(std::vector<float>{0, 0, 0});
  const std::vector<std::int64_t> count{2}, displ{1};
  comm->allgatherv<float>(piece.span(), gathered.span(), count, displ);
  EXPECT_EQ(gathered.to_host(), (std::vector<float>{0, 5, 6}));

  auto block = upload(std::vector<std::int32_t>{0, 0});
  const auto blocks = upload(std::vector<std::int32_t>{7, 8});
  comm->reduce_scatterv<std::int32_t>(blocks.span(), block.span(), count, ReduceOp::max);
  EXPECT_EQ(block.to_host(), (std::vector<std::int32_t>{7, 8}));

  comm->broadcast<double>(data.span(), 0);
  comm->barrier();
  EXPECT_EQ(data.to_host(), (std::vector<double>{1, 2, 3, 4}));
}

TEST(CudaNcclCommunicator, ChecksCallsAndMessages) {
  MOE_REQUIRE_GPU();
  auto comm = NcclCommunicator::single(0);
  auto data = upload(std::vector<double>{1, 2, 3, 4});
  // Overlapping send and receive buffers outside the in-place form break the call rules.
  EXPECT_THROW(comm->allreduce<double>(data.span().subspan(0, 3), data.span().subspan(1, 3), ReduceOp::sum),
               std::invalid_argument);

  const auto message = upload(std::vector<float>{1.5f, 2.5f});
  comm->send<float>(message.span(), 0, 7);
  comm->send<float>(message.span(), 0, 8);
  auto got = upload(std::vector<float>{0, 0});
  comm->recv<float>(got.span(), 0, 7);
  EXPECT_EQ(got.to_host(), (std::vector<float>{1.5f, 2.5f}));
  EXPECT_THROW(comm->recv<float>(got.span(), 0, 9), std::invalid_argument);  // the next message has tag 8
  EXPECT_THROW(comm->recv<float>(got.span(), 0, 8), std::invalid_argument);  // nothing left to receive
}

TEST(CudaNcclWorld, OneRankJoinsAndPassesTheConformanceBody) {
  MOE_REQUIRE_GPU();
  InprocWorld(1, RankExecution::threads).run([&](Communicator& bootstrap) {
    NcclWorld nccl = join_nccl_world(bootstrap);
    EXPECT_EQ(nccl.device, 0);
    ASSERT_EQ(nccl.world->size(), 1);
    expect_conformant(*nccl.world, "NCCL, 1 rank");
  });
}

}  // namespace
}  // namespace moe::cuda
