// Megatron's RankGenerator: which global ranks form a process group, for one device mesh.
//
// A mesh has six axes, named as in Megatron: tp, cp, ep, dp, pp and gtp_remat (the GTP weight-rematerialisation
// axis: its ranks hold distinct data and shards of the same weights). The order string lists them
// fastest-varying first ("tp-cp-ep-dp-pp": consecutive ranks differ in tp), and an axis of size 1 that the
// order leaves out is appended (it changes no stride). With sizes s_i in that order:
//   stride_i = Π_{j<i} s_j,   rank = Σ_i idx_i · stride_i.
// A group is named by a token set such as "tp-ep": its ranks share every coordinate outside the set (the
// "unmasked" axes) and run over every coordinate inside it (the "masked" axes), first masked axis fastest.
// rank_groups() lists all groups in Megatron's order (unmasked coordinates enumerated first-fastest), which is
// the order in which every rank must create them.
//
// Upstream: megatron/core/parallel_state.py (RankGenerator, generate_masked_orthogonal_rank_groups).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace moe {

// The six axis names an order string may use.
std::vector<std::string> rank_axis_names();

// Splits "tp-cp-ep-dp-pp" into tokens; throws std::invalid_argument on an unknown or repeated token.
std::vector<std::string> parse_order(std::string_view order);

class RankGenerator {
 public:
  // Same argument order as Megatron's RankGenerator(tp, ep, dp, pp, cp, order, rank_offset = 0, gtp_remat = 1),
  // without the offset. Throws std::invalid_argument if a size is < 1, or an axis of size > 1 is missing from the
  // order.
  RankGenerator(int tp, int ep, int dp, int pp, int cp, std::string_view order, int gtp_remat = 1);

  int world_size() const { return world_size_; }
  // The complete order (the given tokens, then the omitted size-1 axes) and the size of each of its axes.
  const std::vector<std::string>& order() const { return order_; }
  const std::vector<int>& sizes() const { return sizes_; }

  // Every group of the token set, each listed first-masked-axis fastest.
  std::vector<std::vector<int>> rank_groups(std::string_view token_set) const;
  // The one group of the token set that contains `rank`; equal to the element of rank_groups() holding it.
  std::vector<int> group_of(int rank, std::string_view token_set) const;
  // The distance between neighbouring ranks along one axis: the product of the sizes of the axes before it.
  int stride(std::string_view axis) const;

 private:
  struct Split;
  // mask[i] is true when order()[i] is in the token set.
  std::vector<bool> mask(std::string_view token_set) const;
  Split split(std::string_view token_set) const;

  std::vector<std::string> order_;
  std::vector<int> sizes_;
  std::vector<int> strides_;
  int world_size_ = 1;
};

}  // namespace moe
