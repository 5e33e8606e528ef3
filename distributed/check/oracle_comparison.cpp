#include "distributed/check/oracle_comparison.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace moe::dist {
namespace {

Quantity quantity_of(ParamClass c) {
  switch (c) {
    case ParamClass::sequence_parallel: return Quantity::grad_sequence_parallel;
    case ParamClass::dense: return Quantity::grad_dense;
    case ParamClass::expert: return Quantity::grad_expert;
  }
  return Quantity::grad_dense;
}

struct Comparer {
  const Tolerance& tol;
  int rank;
  RankComparison result;

  void fail(const std::string& what, double got, double want) {
    if (result.failed) return;
    result.failed = true;
    result.first = Mismatch{what, rank, 0, got, want};
  }

  void check(Quantity q, const std::string& tensor, const double* got, const double* want, Eigen::Index n) {
    QuantityError& e = result.errors[static_cast<size_t>(q)];
    // Running maxima in locals: through `e` every store could alias got/want (all doubles), and the compiler would
    // reload and store them on every element.
    double max_abs = e.max_abs, max_ratio = e.max_ratio;
    Eigen::Index first_bad = -1;
    for (Eigen::Index i = 0; i < n; ++i) {
      const double diff = std::abs(got[i] - want[i]);
      const double ratio = tol.ratio(got[i], want[i]);
      max_abs = std::max(max_abs, diff);
      max_ratio = std::max(max_ratio, ratio);
      if (!(ratio <= 1.0) && first_bad < 0) first_bad = i;
    }
    e.max_abs = max_abs;
    e.max_ratio = max_ratio;
    e.compared += n;
    if (first_bad >= 0 && !result.failed) {
      result.failed = true;
      result.first = Mismatch{tensor, rank, first_bad, got[first_bad], want[first_bad]};
    }
  }

  // Integers, so no tolerance: any difference fails (ratio ∞), and max_abs is the largest difference in counts.
  void check_exact(Quantity q, const std::string& tensor, const std::vector<std::int64_t>& got,
                   const std::vector<std::int64_t>& want) {
    if (got.size() != want.size()) {
      fail(tensor + " (entries)", double(got.size()), double(want.size()));
      return;
    }
    QuantityError& e = result.errors[static_cast<size_t>(q)];
    for (size_t i = 0; i < got.size(); ++i) {
      const double diff = std::abs(double(got[i] - want[i]));
      e.max_abs = std::max(e.max_abs, diff);
      if (diff > 0) {
        e.max_ratio = std::numeric_limits<double>::infinity();
        if (!result.failed) {
          result.failed = true;
          result.first = Mismatch{tensor, rank, Eigen::Index(i), double(got[i]), double(want[i])};
        }
      }
    }
    e.compared += static_cast<long long>(got.size());
  }
};

}  // namespace

std::string_view to_string(Quantity q) {
  switch (q) {
    case Quantity::objective: return "objective";
    case Quantity::grad_sequence_parallel: return "grad sp-replicated";
    case Quantity::grad_dense: return "grad dense (TP)";
    case Quantity::grad_expert: return "grad experts";
    case Quantity::expert_bias: return "expert bias";
    case Quantity::expert_counts: return "expert counts";
    case Quantity::parameters: return "parameters";
    case Quantity::optimizer_state: return "optimizer state";
  }
  return "?";
}

void RankComparison::merge(const RankComparison& other) {
  for (size_t q = 0; q < errors.size(); ++q) {
    errors[q].max_abs = std::max(errors[q].max_abs, other.errors[q].max_abs);
    errors[q].max_ratio = std::max(errors[q].max_ratio, other.errors[q].max_ratio);
    errors[q].compared += other.errors[q].compared;
  }
  if (other.failed && (!failed || other.first.rank < first.rank)) {
    failed = true;
    first = other.first;
  }
}

RankComparison compare_with_oracle(const ModelConfig& config, const GlobalStep& oracle, RankStep& step,
                                   const ProcessGroups& groups, int rank, const Tolerance& tolerance) {
  Comparer cmp{tolerance, rank, {}};
  cmp.check(Quantity::objective, "objective", &step.objective, &oracle.objective, 1);

  ModelShard<double> want = shard_model(config, oracle.grads, groups, rank);
  const int first_expert = groups.experts_of(rank, config.layer.num_experts).first;
  const auto got_tensors = shard_tensors(step.grads, first_expert);
  const auto want_tensors = shard_tensors(want, first_expert);
  for (size_t i = 0; i < got_tensors.size(); ++i) {
    if (got_tensors[i].size != want_tensors[i].size) {
      cmp.fail(got_tensors[i].name + " (size)", double(got_tensors[i].size), double(want_tensors[i].size));
      continue;
    }
    cmp.check(quantity_of(got_tensors[i].param_class), got_tensors[i].name, got_tensors[i].data, want_tensors[i].data,
              got_tensors[i].size);
  }

  for (size_t i = 0; i < step.expert_bias_updated.size(); ++i) {
    const size_t l = static_cast<size_t>(step.layers[i]);
    const auto& w = oracle.expert_bias_updated[l];
    const auto& g = step.expert_bias_updated[i];
    if (w.size() != g.size()) {
      cmp.fail("layer" + std::to_string(l) + ".expert_bias (entries)", double(g.size()), double(w.size()));
      continue;
    }
    cmp.check(Quantity::expert_bias, "layer" + std::to_string(l) + ".expert_bias", g.data(), w.data(), w.size());
  }
  // Every layer's counts, hash layers included (global block index: layers, then MTP depths).
  if (step.bias_counts.size() != step.layers.size())
    cmp.fail("expert counts (layers)", double(step.bias_counts.size()), double(step.layers.size()));
  for (size_t i = 0; i < std::min(step.bias_counts.size(), step.layers.size()); ++i) {
    const size_t l = static_cast<size_t>(step.layers[i]);
    if (l >= oracle.bias_counts.size()) {
      cmp.fail("layer" + std::to_string(l) + ".expert_counts (layer)", double(l), double(oracle.bias_counts.size()));
      continue;
    }
    cmp.check_exact(Quantity::expert_counts, "layer" + std::to_string(l) + ".expert_counts", step.bias_counts[i],
                    oracle.bias_counts[l]);
  }
  return cmp.result;
}

RankComparison compare_with_trajectory(const ModelConfig& config, const TrajectoryPoint& oracle, double objective,
                                       double grad_norm,
                                       ModelShard<double>& params, const ShardMoments& moments,
                                       const ProcessGroups& groups, int rank, const Tolerance& tolerance) {
  Comparer cmp{tolerance, rank, {}};
  cmp.check(Quantity::objective, "objective", &objective, &oracle.objective, 1);
  cmp.check(Quantity::objective, "grad_norm", &grad_norm, &oracle.grad_norm, 1);  // 0 = 0 when clipping is off
  const int first_expert = groups.experts_of(rank, config.layer.num_experts).first;
  ModelShard<double> want = shard_model(config, oracle.params, groups, rank);
  const auto got = shard_tensors(params, first_expert);
  const auto expected = shard_tensors(want, first_expert);
  for (size_t i = 0; i < got.size(); ++i)
    cmp.check(Quantity::parameters, got[i].name, got[i].data, expected[i].data, got[i].size);
  for (size_t l = 0; l < params.layers.size(); ++l) {
    const auto& g = params.layers[l].expert_bias;
    cmp.check(Quantity::expert_bias, "layer" + std::to_string(params.layer_id(l)) + ".expert_bias",
              g.data(), want.layers[l].expert_bias.data(), g.size());
  }
  for (size_t k = 0; k < params.mtp.size(); ++k) {
    const auto& g = params.mtp[k].layer.expert_bias;
    cmp.check(Quantity::expert_bias, "mtp" + std::to_string(k) + ".expert_bias", g.data(),
              want.mtp[k].layer.expert_bias.data(), g.size());
  }
  if (!moments.m.empty()) {
    // The oracle's moments (flat, trained_tensors order) laid out as a model, so they can be sharded like one:
    // one copy of the model's shapes, filled with m, then with v.
    ModelParams<double> laid_out = oracle.params;
    const auto slots = trained_tensors(config, laid_out);
    for (const auto* which : {&oracle.adam.m, &oracle.adam.v}) {
      for (size_t i = 0; i < slots.size(); ++i) std::copy((*which)[i].begin(), (*which)[i].end(), slots[i].data);
      ModelShard<double> state = shard_model(config, laid_out, groups, rank);
      const auto expected_state = shard_tensors(state, first_expert);
      const auto& mine = which == &oracle.adam.m ? moments.m : moments.v;
      for (size_t i = 0; i < expected_state.size(); ++i)
        cmp.check(Quantity::optimizer_state, expected_state[i].name + (which == &oracle.adam.m ? ".m" : ".v"),
                  mine[i].data(), expected_state[i].data, expected_state[i].size);
    }
  }
  return cmp.result;
}

}  // namespace moe::dist
