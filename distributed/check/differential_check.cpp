#include "distributed/check/differential_check.hpp"

#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/rank_groups.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
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

// In-process ranks resuming together read one checkpoint: the first to ask loads it, the others share that load
// (it was one identical read and check of every piece per rank). Keyed by the folder, the bytes of its
// checkpoint.json (which list every piece's checksum) and the run's model, so a rewritten checkpoint or another
// model loads afresh; a bad checkpoint throws on every rank that asks. Under MPI a process is one rank.
std::shared_ptr<const TrainingState> load_once(const std::string& dir, const ModelConfig& config) {
  static std::mutex mu;
  static std::string loaded_key;
  static const ModelConfig* loaded_for = nullptr;
  static std::shared_ptr<const TrainingState> loaded;
  std::ifstream meta(std::filesystem::path(dir) / "checkpoint.json", std::ios::binary);
  const std::string key = dir + '\n' + std::string(std::istreambuf_iterator<char>(meta), {});
  std::lock_guard<std::mutex> lock(mu);
  if (!loaded || !meta || key != loaded_key || loaded_for != &config) {
    loaded.reset();
    loaded = std::make_shared<const TrainingState>(load_checkpoint(dir, config));
    loaded_key = key;
    loaded_for = &config;
  }
  return loaded;
}

// Steps [begin, end) of the run under `layout` on the first layout.world ranks of `world`, from the run's
// parameters or from a checkpoint; saves at the end when asked. Returns the merged comparison of each step.
std::vector<RankComparison> run_phase(Communicator& world, const RunProblem& p, const ParallelLayout& layout,
                                      int begin, int end, bool from_checkpoint, bool save_at_end,
                                      const std::vector<TrajectoryPoint>& oracle) {
  std::vector<RankComparison> out;
  if (layout.world > world.size())
    throw std::invalid_argument("the layout needs " + std::to_string(layout.world) + " ranks; the world has " +
                                std::to_string(world.size()));
  auto sub = world.split(world.rank() < layout.world ? 0 : 1, world.rank());
  if (world.rank() < layout.world) {
    const ProcessGroups groups(layout);
    const RankGroups comms(*sub, groups);
    std::unique_ptr<RankTrainer> trainer;
    if (from_checkpoint) {
      const std::shared_ptr<const TrainingState> state = load_once(p.checkpoint_dir, p.config);
      trainer = std::make_unique<RankTrainer>(p.config, *state, groups, comms, p.options, p.optimizer);
    } else {
      trainer = std::make_unique<RankTrainer>(p.config, p.params, groups, comms, p.options, p.optimizer);
    }
    for (int s = begin; s < end; ++s) {
      const double objective = trainer->step(p.batches[static_cast<size_t>(s)]);
      const ShardMoments moments = trainer->moments();
      out.push_back(merge_over(*sub, compare_with_trajectory(p.config, oracle[static_cast<size_t>(s)], objective,
                                                             trainer->grad_norm(),
                                                             trainer->params(), moments, groups, sub->rank(),
                                                             p.tolerance)));
    }
    if (save_at_end) trainer->save(p.checkpoint_dir, *sub);
  }
  world.barrier();
  return out;
}

}  // namespace

std::vector<TrajectoryPoint> oracle_trajectory(const RunProblem& p) {
  const int steps = static_cast<int>(p.batches.size());
  const int half = p.resume_as ? steps / 2 : steps;
  const std::vector<GlobalBatch> first(p.batches.begin(), p.batches.begin() + half);
  std::vector<TrajectoryPoint> points = reference_trajectory(p.config, p.params, first, p.layout, p.options.micro_batch,
                                                             p.options.mode, p.optimizer.config);
  if (p.resume_as) {
    const std::vector<GlobalBatch> second(p.batches.begin() + half, p.batches.end());
    const ModelParams<double> start = half > 0 ? points.back().params : p.params;
    const AdamState adam = half > 0 ? points.back().adam : AdamState{};
    auto more = reference_trajectory(p.config, start, second, *p.resume_as, p.options.micro_batch, p.options.mode,
                                     p.optimizer.config, adam);
    points.insert(points.end(), more.begin(), more.end());
  }
  return points;
}

std::vector<RankComparison> check_run_on_world(Communicator& world, const RunProblem& p,
                                               const std::vector<TrajectoryPoint>& oracle) {
  const int steps = static_cast<int>(p.batches.size());
  if (!p.resume_as) return run_phase(world, p, p.layout, 0, steps, false, false, oracle);
  if (p.checkpoint_dir.empty()) throw std::invalid_argument("resuming needs a checkpoint directory");
  auto out = run_phase(world, p, p.layout, 0, steps / 2, false, true, oracle);
  auto more = run_phase(world, p, *p.resume_as, steps / 2, steps, true, false, oracle);
  out.insert(out.end(), more.begin(), more.end());
  return out;
}

std::vector<RankComparison> check_run_inproc(const RunProblem& p, const std::vector<TrajectoryPoint>& oracle) {
  const int world = std::max(p.layout.world, p.resume_as ? p.resume_as->world : 1);
  std::mutex mu;
  std::vector<RankComparison> result;
  InprocWorld(world).run([&](Communicator& comm) {
    auto merged = check_run_on_world(comm, p, oracle);
    if (comm.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      result = std::move(merged);
    }
  });
  return result;
}

GlobalStep oracle_step(const CheckProblem& p) {
  return global_step(p.config, p.params, p.batch, p.layout, p.options.micro_batch, p.options.mode);
}

RankStep step_on_world(Communicator& world, const CheckProblem& p, const ProcessGroups& groups) {
  const RankGroups comms(world, groups);
  const ModelShard<double> shard = shard_model(p.config, p.params, groups, world.rank());
  return train_step(p.config, shard, p.batch, groups, comms, p.options);
}

RankComparison check_on_world(Communicator& world, const CheckProblem& p, const GlobalStep& oracle) {
  const ProcessGroups groups(p.layout);
  RankStep step = step_on_world(world, p, groups);
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
