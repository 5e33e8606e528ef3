#include "reference/rank_generator.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

std::vector<std::string> split_tokens(std::string_view text) {
  std::vector<std::string> tokens;
  std::size_t start = 0;
  while (true) {
    const auto dash = text.find('-', start);
    tokens.emplace_back(text.substr(start, dash == std::string_view::npos ? std::string_view::npos : dash - start));
    if (dash == std::string_view::npos) return tokens;
    start = dash + 1;
  }
}

// Coordinates of `index` in a shape whose first axis varies fastest.
std::vector<int> decompose(int index, const std::vector<int>& shape) {
  std::vector<int> idx(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    idx[i] = index % shape[i];
    index /= shape[i];
  }
  return idx;
}

int inner_product(const std::vector<int>& a, const std::vector<int>& b) {
  int sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace

std::vector<std::string> rank_axis_names() { return {"tp", "cp", "ep", "dp", "pp", "gtp_remat"}; }

std::vector<std::string> parse_order(std::string_view order) {
  const auto known = rank_axis_names();
  auto tokens = split_tokens(order);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (std::find(known.begin(), known.end(), tokens[i]) == known.end())
      throw std::invalid_argument("order rule: token '" + tokens[i] + "' in '" + std::string(order) +
                                  "' is not one of tp, cp, ep, dp, pp, gtp_remat");
    if (std::find(tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(i), tokens[i]) !=
        tokens.begin() + static_cast<std::ptrdiff_t>(i))
      throw std::invalid_argument("order rule: token '" + tokens[i] + "' appears more than once in '" +
                                  std::string(order) + "'");
  }
  return tokens;
}

RankGenerator::RankGenerator(int tp, int ep, int dp, int pp, int cp, std::string_view order, int gtp_remat)
    : order_(parse_order(order)) {
  const auto size_of = [&](const std::string& axis) {
    if (axis == "tp") return tp;
    if (axis == "cp") return cp;
    if (axis == "ep") return ep;
    if (axis == "dp") return dp;
    if (axis == "gtp_remat") return gtp_remat;
    return pp;
  };
  for (const auto& axis : rank_axis_names()) {
    const int size = size_of(axis);
    if (size < 1) throw std::invalid_argument("rank generator rule: " + axis + " size must be >= 1");
    if (std::find(order_.begin(), order_.end(), axis) != order_.end()) continue;
    // Megatron: an axis left out of the order is only allowed when it has size 1.
    if (size != 1)
      throw std::invalid_argument("order rule: " + axis + " has size " + std::to_string(size) +
                                  " but is missing from the order '" + std::string(order) + "'");
    order_.push_back(axis);
  }
  for (const auto& axis : order_) {
    strides_.push_back(world_size_);
    sizes_.push_back(size_of(axis));
    world_size_ *= sizes_.back();
  }
}

std::vector<bool> RankGenerator::mask(std::string_view token_set) const {
  std::vector<bool> masked(order_.size(), false);
  for (const auto& token : split_tokens(token_set)) {
    const auto it = std::find(order_.begin(), order_.end(), token);
    if (it == order_.end())
      throw std::invalid_argument("group rule: token '" + token + "' of group '" + std::string(token_set) +
                                  "' is not one of tp, cp, ep, dp, pp, gtp_remat");
    masked[static_cast<std::size_t>(it - order_.begin())] = true;
  }
  return masked;
}

// The masked axes of a token set (the group's own axes) and the unmasked ones (which pick the group).
struct RankGenerator::Split {
  std::vector<int> masked_shape, masked_stride, unmasked_shape, unmasked_stride;
  int group_size = 1;

  // Ranks of the group whose unmasked coordinates sum to `base`, first masked axis fastest.
  std::vector<int> members(int base) const {
    std::vector<int> ranks;
    for (int r = 0; r < group_size; ++r) ranks.push_back(base + inner_product(decompose(r, masked_shape), masked_stride));
    return ranks;
  }
};

RankGenerator::Split RankGenerator::split(std::string_view token_set) const {
  const auto masked = mask(token_set);
  Split s;
  for (std::size_t i = 0; i < order_.size(); ++i) {
    (masked[i] ? s.masked_shape : s.unmasked_shape).push_back(sizes_[i]);
    (masked[i] ? s.masked_stride : s.unmasked_stride).push_back(strides_[i]);
    if (masked[i]) s.group_size *= sizes_[i];
  }
  return s;
}

std::vector<std::vector<int>> RankGenerator::rank_groups(std::string_view token_set) const {
  const auto s = split(token_set);
  std::vector<std::vector<int>> groups;
  for (int g = 0; g < world_size_ / s.group_size; ++g)
    groups.push_back(s.members(inner_product(decompose(g, s.unmasked_shape), s.unmasked_stride)));
  return groups;
}

int RankGenerator::stride(std::string_view axis) const {
  const auto it = std::find(order_.begin(), order_.end(), axis);
  if (it == order_.end())
    throw std::invalid_argument("group rule: axis '" + std::string(axis) + "' is not one of tp, cp, ep, dp, pp, gtp_remat");
  return strides_[static_cast<std::size_t>(it - order_.begin())];
}

std::vector<int> RankGenerator::group_of(int rank, std::string_view token_set) const {
  if (rank < 0 || rank >= world_size_)
    throw std::invalid_argument("rank rule: rank " + std::to_string(rank) + " is outside the world of " +
                                std::to_string(world_size_) + " ranks");
  const auto s = split(token_set);
  // Keep the rank's own unmasked coordinates.
  int base = 0;
  for (std::size_t i = 0; i < s.unmasked_shape.size(); ++i)
    base += rank / s.unmasked_stride[i] % s.unmasked_shape[i] * s.unmasked_stride[i];
  return s.members(base);
}

}  // namespace moe
