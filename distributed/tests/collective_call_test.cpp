// The call descriptor both backends exchange: its flat form, and check_calls' verdicts on hand-made calls.
#include "distributed/comm/collective_call.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

CollectiveCall alltoallv(std::vector<std::int64_t> send_counts, std::vector<std::int64_t> recv_counts) {
  CollectiveCall c;
  c.kind = CollectiveKind::alltoallv;
  c.type = ElementType::f32;
  const auto packed = [](const std::vector<std::int64_t>& counts, std::int64_t& total) {
    std::vector<std::int64_t> displs;
    total = 0;
    for (std::int64_t n : counts) {
      displs.push_back(total);
      total += n;
    }
    return displs;
  };
  c.send_displs = packed(send_counts, c.send_size);
  c.recv_displs = packed(recv_counts, c.recv_size);
  c.send_counts = std::move(send_counts);
  c.recv_counts = std::move(recv_counts);
  return c;
}

std::string verdict(const std::vector<CollectiveCall>& calls) {
  try {
    check_calls(calls);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "ok";
}

TEST(CollectiveCall, EncodeDecodeRoundTrip) {
  CollectiveCall c = alltoallv({0, 3, 1}, {2, 0, 5});
  c.op = ReduceOp::max;
  c.root = 2;
  c.color = 7;
  c.key = -4;
  c.in_place = true;
  const CollectiveCall d = decode(encode(c));
  EXPECT_EQ(encode(d), encode(c));
  EXPECT_EQ(d.kind, CollectiveKind::alltoallv);
  EXPECT_EQ(d.key, -4);
  EXPECT_EQ(d.recv_counts, (std::vector<std::int64_t>{2, 0, 5}));
}

TEST(CollectiveCall, DecodeRejectsMalformedWords) {
  std::vector<std::int64_t> words = encode(alltoallv({1}, {1}));
  EXPECT_THROW(decode(std::span(words).first(5)), std::invalid_argument);
  words.push_back(0);
  EXPECT_THROW(decode(words), std::invalid_argument);
  words = encode(alltoallv({1}, {1}));
  words[0] = 99;  // no such collective
  EXPECT_THROW(decode(words), std::invalid_argument);
}

TEST(CheckCalls, AcceptsMatchingAlltoallvWithZeroBlocks) {
  EXPECT_EQ(verdict({alltoallv({0, 2}, {0, 1}), alltoallv({1, 0}, {2, 0})}), "ok");
}

TEST(CheckCalls, NamesBothRanksOfAnAlltoallvMismatch) {
  EXPECT_EQ(verdict({alltoallv({0, 2}, {0, 1}), alltoallv({1, 0}, {3, 0})}),
            "alltoallv: rank 0 sends 2 elements to rank 1 but rank 1 expects 3 (send_counts must match the peer's "
            "recv_counts)");
}

TEST(CheckCalls, RejectsAReceiveBlockPastTheBuffer) {
  CollectiveCall c = alltoallv({1}, {1});
  c.recv_displs = {1};
  EXPECT_EQ(verdict({c}),
            "alltoallv: rank 0's receive block of rank 0 [1, 2) exceeds its receive buffer of 1 elements");
}

TEST(CheckCalls, RejectsDifferentCollectives) {
  CollectiveCall barrier;
  EXPECT_EQ(verdict({barrier, alltoallv({1}, {1})}),
            "collective mismatch: rank 0 calls barrier but rank 1 calls alltoallv (every rank must call the same "
            "collectives in the same order)");
}

TEST(CheckCalls, ReduceScatterNeedsAWholeNumberOfBlocks) {
  CollectiveCall c;
  c.kind = CollectiveKind::reduce_scatter;
  c.send_size = 5;
  c.recv_size = 2;
  EXPECT_EQ(verdict({c, c}),
            "reduce_scatter: rank 0 sends 5 and receives 2 elements on 2 ranks (the send buffer "
            "holds size() blocks)");
}

}  // namespace
}  // namespace moe
