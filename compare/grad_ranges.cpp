#include "compare/grad_ranges.hpp"

#include "compare/dump.hpp"

#include <algorithm>

namespace moe::compare {

std::vector<RankGradRanges> read_grad_ranges(const nlohmann::json& j, int world, const std::string& where) {
  const std::string at = where + ": grad_ranges";
  if (!j.is_array() || static_cast<int>(j.size()) != world)
    throw DumpError(at + ": one object per rank (" + std::to_string(world) + "), each {stem: [start, end]}");
  std::vector<RankGradRanges> ranks;
  for (size_t r = 0; r < j.size(); ++r) {
    if (!j[r].is_object()) throw DumpError(at + "[" + std::to_string(r) + "] must be an object {stem: [start, end]}");
    RankGradRanges mine;
    for (const auto& [stem, pair] : j[r].items()) {
      const bool integers = pair.is_array() && pair.size() == 2 && pair[0].is_number_integer() &&
                            pair[1].is_number_integer();
      if (!integers || pair[0].get<std::int64_t>() < 0 || pair[1].get<std::int64_t>() <= pair[0].get<std::int64_t>())
        throw DumpError(at + "[" + std::to_string(r) + "]." + stem + ": " + pair.dump() +
                        " is not a range [start, end] with 0 <= start < end");
      mine.emplace(stem, GradRange{pair[0].get<std::int64_t>(), pair[1].get<std::int64_t>()});
    }
    ranks.push_back(std::move(mine));
  }
  return ranks;
}

GroupKind optimizer_group(const std::string& stem) {
  return stem.find(".expert_fc") != std::string::npos ? GroupKind::expt_dp : GroupKind::dp_cp;
}

GradRange even_grad_range(std::int64_t elements, int position, int group_size) {
  return {elements * position / group_size, elements * (position + 1) / group_size};
}

void GradRangeTiling::add(const std::string& shard_key, std::int64_t elements, const GradRange& range, int rank) {
  auto& [n, claims] = shards_[shard_key];
  n = elements;
  claims.push_back({range, rank});
}

std::string GradRangeTiling::check() const {
  for (const auto& [key, shard] : shards_) {
    std::vector<Claim> claims = shard.second;
    std::sort(claims.begin(), claims.end(),
              [](const Claim& a, const Claim& b) { return a.range.start < b.range.start; });
    std::int64_t next = 0;  // the first element no claim so far covers
    for (const Claim& c : claims) {
      if (c.range.start > next)
        return key + ": elements [" + std::to_string(next) + ", " + std::to_string(c.range.start) +
               ") are held by no rank (nothing would compare them)";
      if (c.range.start < next)
        return key + ": rank " + std::to_string(c.rank) + "'s range [" + std::to_string(c.range.start) + ", " +
               std::to_string(c.range.end) + ") overlaps another rank's (one element, two gradients)";
      next = c.range.end;
    }
    if (next != shard.first)
      return key + ": the ranges end at " + std::to_string(next) + ", the shard has " + std::to_string(shard.first) +
             " elements";
  }
  return "";
}

}  // namespace moe::compare
