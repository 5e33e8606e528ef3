// Boundary checks of the layer oracle: every shape and index is checked against the config before any math runs,
// and each failure names the tensor and the rule.
#include "reference/moe_layer.hpp"

#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace moe {
namespace {

// These run on every layer call, over every expert and token: a message is built only when its rule is broken.
[[noreturn]] void fail(const std::string& rule) { throw std::invalid_argument("invalid MoE layer input: " + rule); }

void require(bool ok, std::string_view rule) {
  if (!ok) fail(std::string(rule));
}

std::string shape(Eigen::Index r, Eigen::Index c) { return "[" + std::to_string(r) + ", " + std::to_string(c) + "]"; }

// `name`, or name[index] with an index.
template <typename M>
void require_shape(const M& m, Eigen::Index rows, Eigen::Index cols, std::string_view name, int index = -1) {
  if (m.rows() == rows && m.cols() == cols) return;
  fail(std::string(name) + (index >= 0 ? "[" + std::to_string(index) + "]" : "") + " must have shape " +
       shape(rows, cols) + ", got " + shape(m.rows(), m.cols()));
}

template <typename M>
void require_empty(const M& m, std::string_view name, std::string_view why) {
  if (m.size() != 0) fail(std::string(name) + " is given but " + std::string(why));
}

template <typename T>
void validate_params(const MoeConfig& c, const MoeParams<T>& p, RoutedWeights routed) {
  const int h = c.hidden, E = c.num_experts, d = c.ffn_hidden, w = c.expert_width();
  require_shape(p.router_weight, E, h, "router_weight");
  if (!c.expert_bias) require_empty(p.expert_bias, "expert_bias", "the config has expert_bias off");
  else if (p.expert_bias.size() != E) fail("expert_bias must have E = " + std::to_string(E) + " entries");

  if (routed == RoutedWeights::streamed && (!p.expert_fc1.empty() || !p.expert_fc2.empty()))
    fail("expert_fc1 and expert_fc2 must be empty when the routed experts are supplied one at a time");
  if (routed == RoutedWeights::held &&
      (static_cast<int>(p.expert_fc1.size()) != E || static_cast<int>(p.expert_fc2.size()) != E))
    fail("expert_fc1 and expert_fc2 must hold one matrix per expert (E = " + std::to_string(E) + ")");
  for (int e = 0; e < static_cast<int>(p.expert_fc1.size()); ++e) {
    require_shape(p.expert_fc1[static_cast<size_t>(e)], 2 * d, w, "expert_fc1", e);
    require_shape(p.expert_fc2[static_cast<size_t>(e)], w, d, "expert_fc2", e);
  }

  if (c.has_shared_expert()) {
    require_shape(p.shared_fc1, 2 * c.shared_expert_ffn_hidden, h, "shared_fc1");
    require_shape(p.shared_fc2, h, c.shared_expert_ffn_hidden, "shared_fc2");
  } else {
    require_empty(p.shared_fc1, "shared_fc1", "the config has no shared expert");
    require_empty(p.shared_fc2, "shared_fc2", "the config has no shared expert");
  }
  if (c.shared_expert_gate) require_shape(p.shared_gate, 1, h, "shared_gate");
  else require_empty(p.shared_gate, "shared_gate", "the config has shared_expert_gate off");

  if (c.latent_size > 0) {
    require_shape(p.latent_down, c.latent_size, h, "latent_down");
    require_shape(p.latent_up, h, c.latent_size, "latent_up");
  } else {
    require_empty(p.latent_down, "latent_down", "the config has latent_size 0");
    require_empty(p.latent_up, "latent_up", "the config has latent_size 0");
  }

  if (c.hash_routing) {
    if (p.tid2eid.rows() == 0 || p.tid2eid.cols() != c.topk)
      fail("tid2eid must have shape [V, k = " + std::to_string(c.topk) + "] with V > 0");
    for (Eigen::Index v = 0; v < p.tid2eid.rows(); ++v) {
      std::set<std::int64_t> seen;
      for (Eigen::Index j = 0; j < p.tid2eid.cols(); ++j) {
        const auto e = p.tid2eid(v, j);
        if (e < 0 || e >= E)
          fail("tid2eid[" + std::to_string(v) + "] names expert " + std::to_string(e) + ", outside [0, " +
               std::to_string(E) + ")");
        if (!seen.insert(e).second)
          fail("tid2eid[" + std::to_string(v) + "] names expert " + std::to_string(e) + " twice");
      }
    }
  } else {
    require_empty(p.tid2eid, "tid2eid", "the config has hash_routing off");
  }
}

}  // namespace

template <typename T>
void validate_layer_inputs(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                           RoutedWeights routed) {
  config.validate();
  validate_params(config, params, routed);
  require(inputs.seq > 0 && inputs.batch > 0, "seq and batch must be > 0");
  const Eigen::Index tokens = static_cast<Eigen::Index>(inputs.seq) * inputs.batch;
  require_shape(inputs.x, tokens, config.hidden, "x (rows = seq·batch)");

  if (config.hash_routing) {
    require_shape(inputs.input_ids, inputs.batch, inputs.seq, "input_ids ([batch, seq])");
    for (Eigen::Index i = 0; i < inputs.input_ids.size(); ++i) {
      const auto id = inputs.input_ids.data()[i];
      if (id < 0 || id >= params.tid2eid.rows())
        fail("input id " + std::to_string(id) + " is outside the tid2eid table [0, " +
             std::to_string(params.tid2eid.rows()) + ")");
    }
  }

  require(inputs.padding_mask.empty() || static_cast<Eigen::Index>(inputs.padding_mask.size()) == tokens,
          "padding_mask must be empty or have one entry per token");

  if (!inputs.partition.empty()) {
    std::vector<int> seen(static_cast<size_t>(tokens), 0);
    for (const auto& part : inputs.partition) {
      for (int row : part) {
        if (row < 0 || row >= tokens) fail("partition names row " + std::to_string(row) + ", outside the tokens");
        ++seen[static_cast<size_t>(row)];
      }
    }
    for (Eigen::Index t = 0; t < tokens; ++t)
      if (seen[static_cast<size_t>(t)] != 1)
        fail("partition must cover every row exactly once (row " + std::to_string(t) + " appears " +
             std::to_string(seen[static_cast<size_t>(t)]) + " times)");
  }

  if (inputs.capacity_decision) {
    require(config.capacity_factor.has_value(), "capacity_decision is given but there is no capacity_factor");
    require(inputs.capacity_decision->rows() == tokens && inputs.capacity_decision->cols() == config.num_experts,
            "capacity_decision must be [tokens, num_experts]");
  }

  if (inputs.selection) {
    require(!config.hash_routing, "a replayed selection is given but the layer routes by hash (its table decides)");
    require(inputs.selection->rows() == tokens && inputs.selection->cols() == config.topk,
            "a replayed selection must be [tokens, topk]");
    for (Eigen::Index t = 0; t < tokens; ++t)
      for (Eigen::Index j = 0; j < config.topk; ++j) {
        const auto e = (*inputs.selection)(t, j);
        if (e < 0 || e >= config.num_experts)
          fail("replayed selection row " + std::to_string(t) + " names expert " + std::to_string(e) +
               ", outside 0.." + std::to_string(config.num_experts - 1));
        for (Eigen::Index i = 0; i < j; ++i)
          if ((*inputs.selection)(t, i) == e)
            fail("replayed selection row " + std::to_string(t) + " names expert " + std::to_string(e) + " twice");
      }
  }

  const auto& sum = inputs.global_aux.tokens_per_expert_sum;
  require(sum.empty() || static_cast<int>(sum.size()) == config.num_experts,
          "global_aux.tokens_per_expert_sum must be empty or have E entries");
  require(inputs.global_aux.steps >= 0 && (inputs.global_aux.steps > 0) == !sum.empty(),
          "global_aux: steps > 0 exactly when counts have been accumulated");
  if (inputs.global_aux_group) {
    require(config.aux_loss_type == AuxLossType::global_aux, "global_aux_group is given but aux_loss_type is not global_aux");
    require(static_cast<int>(inputs.global_aux_group->counts.size()) == config.num_experts,
            "global_aux_group.counts must have E entries");
    // A step of the group may hold only padding: its term is then 0, like aux over a microbatch of padding.
    require(inputs.global_aux_group->tokens >= 0, "global_aux_group.tokens must be >= 0");
  }
}

template void validate_layer_inputs<double>(const MoeConfig&, const MoeParams<double>&, const MoeInputs<double>&,
                                            RoutedWeights);
template void validate_layer_inputs<float>(const MoeConfig&, const MoeParams<float>&, const MoeInputs<float>&,
                                           RoutedWeights);

}  // namespace moe
