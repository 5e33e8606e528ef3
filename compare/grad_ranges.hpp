// Under a distributed optimizer (Megatron's DistributedOptimizer, ZeRO-1/2) each rank's optimizer is handed the
// reduced gradient of only a range of the parameters it holds: the gradient buffer is reduce-scattered over the
// data-parallel group and each rank steps its shard, then the parameters are gathered back. A step dump of such a
// run says which range each rank's gradient files hold (step.json "grad_ranges", compare/README.md): per rank,
// {stem: [start, end]}, the flat elements [start, end) of that rank's (TP / ETP) shard of the parameter, row-major.
// A rank holds no gradient of a parameter outside its map. The ranks holding the same shard of a parameter must
// together hold each of its elements exactly once: a gap would be an element nothing compared, an overlap two
// answers for one element.
#pragma once

#include "reference/process_groups.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace moe::compare {

struct GradRange {
  std::int64_t start = 0, end = 0;  // [start, end) of the shard's flat elements
  std::int64_t size() const { return end - start; }
};

using RankGradRanges = std::map<std::string, GradRange>;  // golden stem -> its range on one rank

// step.json's grad_ranges: an array of `world` objects, each {stem: [start, end]} with 0 <= start < end integers.
// Throws DumpError naming `where` on any other shape (bounds against the shards are checked by GradRangeTiling).
std::vector<RankGradRanges> read_grad_ranges(const nlohmann::json& j, int world, const std::string& where);

// The group a distributed optimizer shards the parameter named by its golden stem over: the expert data-parallel
// group for a routed expert's, dp × cp for every other.
GroupKind optimizer_group(const std::string& stem);

// The range of `elements` that position `position` of a group of `group_size` ranks holds when a distributed optimizer
// splits them evenly: [p·n/g, (p+1)·n/g). Megatron's own split follows its buffers' buckets; this one is for dumps a
// test or `check` writes.
GradRange even_grad_range(std::int64_t elements, int position, int group_size);

// Collects, per parameter shard, the ranges the ranks holding it claim, and checks they tile it.
class GradRangeTiling {
 public:
  // `rank` holds `range` of the shard `shard_key` (the stem and which shard) of `elements` elements.
  void add(const std::string& shard_key, std::int64_t elements, const GradRange& range, int rank);
  // "" when every shard's ranges tile [0, elements) exactly once; else one line naming the first gap or overlap.
  std::string check() const;

 private:
  struct Claim {
    GradRange range;
    int rank = 0;
  };
  std::map<std::string, std::pair<std::int64_t, std::vector<Claim>>> shards_;
};

}  // namespace moe::compare
