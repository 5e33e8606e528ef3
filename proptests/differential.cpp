#include "proptests/differential.hpp"

#include <rapidcheck.h>

#include "distributed/comm/inproc_world.hpp"

#include <mutex>
#include <sstream>

namespace moe::proptest {

std::string report(const dist::RankComparison& r) {
  std::ostringstream os;
  os.precision(17);
  if (r.failed)
    os << "first mismatch: " << r.first.tensor << " on rank " << r.first.rank << " at " << r.first.index
       << ": got " << r.first.got << ", want " << r.first.want << "\n";
  for (int q = 0; q < dist::kQuantities; ++q) {
    const auto& e = r.errors[static_cast<size_t>(q)];
    if (e.compared > 0)
      os << "  " << dist::to_string(static_cast<dist::Quantity>(q)) << ": max |diff| " << e.max_abs
         << ", max diff/tolerance " << e.max_ratio << " over " << e.compared << " values\n";
  }
  return os.str();
}

void require_oracle_match(const dist::CheckProblem& problem, const GlobalStep& oracle, const std::string& what) {
  const dist::RankComparison r = dist::check_inproc(problem, oracle);
  if (!r.pass()) RC_FAIL(what + " (" + std::string(dist::to_string(problem.options.dispatcher)) + ", " +
                         std::string(to_string(problem.options.mode)) + ") differs from the oracle; " + report(r));
  RC_ASSERT(r.errors[static_cast<size_t>(dist::Quantity::objective)].compared > 0);
}

namespace {

std::vector<dist::RankStep> rank_steps(const dist::CheckProblem& p) {
  const ProcessGroups groups(p.layout);
  std::vector<dist::RankStep> steps(static_cast<size_t>(p.layout.world));
  std::mutex mu;
  InprocWorld(p.layout.world).run([&](Communicator& world) {
    dist::RankStep step = dist::step_on_world(world, p, groups);
    std::lock_guard<std::mutex> lock(mu);
    steps[static_cast<size_t>(world.rank())] = std::move(step);
  });
  return steps;
}

}  // namespace

void require_bitwise_equal(const dist::CheckProblem& a, const dist::CheckProblem& b, const std::string& what) {
  RC_ASSERT(a.layout.world == b.layout.world);
  std::vector<dist::RankStep> x = rank_steps(a), y = rank_steps(b);
  const ProcessGroups groups(a.layout);
  const int E = a.config.layer.num_experts;
  std::int64_t compared = 0;
  for (int r = 0; r < a.layout.world; ++r) {
    auto& sx = x[static_cast<size_t>(r)];
    auto& sy = y[static_cast<size_t>(r)];
    if (sx.objective != sy.objective)
      RC_FAIL(what + ": objective on rank " + std::to_string(r) + " differs");
    const int first = local_experts(E, a.layout.ep, groups.rank_in(GroupKind::ep, r)).first;
    const auto tx = dist::shard_tensors(sx.grads, first), ty = dist::shard_tensors(sy.grads, first);
    RC_ASSERT(tx.size() == ty.size());
    for (size_t t = 0; t < tx.size(); ++t)
      for (Eigen::Index i = 0; i < tx[t].size; ++i, ++compared)
        if (!(tx[t].data[i] == ty[t].data[i])) {
          std::ostringstream os;
          os.precision(17);
          os << what << ": " << tx[t].name << " on rank " << r << " at " << i << ": " << tx[t].data[i] << " vs "
             << ty[t].data[i];
          RC_FAIL(os.str());
        }
  }
  RC_ASSERT(compared > 0);
}

}  // namespace moe::proptest
