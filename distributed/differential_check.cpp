#include "distributed/differential_check.hpp"

#include "distributed/inproc_world.hpp"
#include "distributed/rank_groups.hpp"

#include <limits>
#include <mutex>

namespace moe::dist {
namespace {

// Every rank ends with the merge of all ranks' comparisons: maxima by allreduce, the first mismatch from the
// lowest rank that has one (its tensor name travels as characters).
RankComparison merge_over(Communicator& world, RankComparison mine) {
  for (auto& e : mine.errors) {
    world.allreduce<double>(std::span<double>(&e.max_abs, 1), ReduceOp::max);
    world.allreduce<double>(std::span<double>(&e.max_ratio, 1), ReduceOp::max);
    std::int64_t n = e.compared;
    world.allreduce<std::int64_t>(std::span<std::int64_t>(&n, 1), ReduceOp::sum);
    e.compared = n;
  }
  std::int64_t owner = mine.failed ? world.rank() : std::numeric_limits<std::int64_t>::max();
  world.allreduce<std::int64_t>(std::span<std::int64_t>(&owner, 1), ReduceOp::min);
  if (owner == std::numeric_limits<std::int64_t>::max()) return mine;
  const Mismatch m = mine.first;
  std::vector<double> values{double(m.rank), double(m.index), m.got, m.want};
  std::int64_t length = static_cast<std::int64_t>(m.tensor.size());
  const int root = static_cast<int>(owner);
  world.broadcast<double>(values, root);
  world.broadcast<std::int64_t>(std::span<std::int64_t>(&length, 1), root);
  std::vector<std::int32_t> chars(m.tensor.begin(), m.tensor.end());
  chars.resize(static_cast<size_t>(length));
  world.broadcast<std::int32_t>(chars, root);
  mine.failed = true;
  mine.first = Mismatch{std::string(chars.begin(), chars.end()), static_cast<int>(values[0]),
                        static_cast<Eigen::Index>(values[1]), values[2], values[3]};
  return mine;
}

}  // namespace

GlobalStep oracle_step(const CheckProblem& p) {
  return global_step(p.config, p.params, p.batch, p.layout, p.options.micro_batch, p.options.mode);
}

RankComparison check_on_world(Communicator& world, const CheckProblem& p, const GlobalStep& oracle) {
  const ProcessGroups groups(p.layout);
  const RankGroups comms(world, groups);
  const ModelShard<double> shard = shard_model(p.config, p.params, groups, world.rank());
  RankStep step = train_step(p.config, shard, p.batch, groups, comms, p.options);
  return merge_over(world, compare_with_oracle(p.config, oracle, step, groups, world.rank(), p.tolerance));
}

RankComparison check_inproc(const CheckProblem& p, const GlobalStep& oracle) {
  std::mutex mu;
  RankComparison result;
  InprocWorld(p.layout.world).run([&](Communicator& world) {
    const RankComparison merged = check_on_world(world, p, oracle);
    if (world.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      result = merged;
    }
  });
  return result;
}

}  // namespace moe::dist
