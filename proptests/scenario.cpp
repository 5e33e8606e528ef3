#include "proptests/scenario.hpp"

#include "reference/random_init.hpp"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace moe::proptest {

std::int64_t Scenario::valid_tokens() const {
  std::int64_t n = static_cast<std::int64_t>(seq) * sequences;
  for (int p : padded) n -= p;
  return n;
}

dist::CheckProblem make_problem(const Scenario& s) {
  dist::CheckProblem p;
  p.config = s.config;
  p.params = random_model_params<double>(s.config, s.param_seed);
  if (s.cold_experts) {
    const int per_rank = s.config.layer.num_experts / s.layout.ep;
    for (auto& layer : p.params.layers)
      if (layer.expert_bias.size() > 0) layer.expert_bias.tail(per_rank).setConstant(-10.0);
  }
  p.batch = random_global_batch(s.config, s.seq, s.sequences, s.batch_seed, s.padded);
  SeededUniform rng(s.batch_seed ^ 0x9e3779b97f4a7c15ULL);
  for (Eigen::Index i = 0; i < p.batch.input_ids.size(); ++i)
    p.batch.input_ids.data()[i] = static_cast<std::int64_t>(rng.bits() % static_cast<std::uint64_t>(s.id_pool));
  if (s.distinct_ids) {  // a shuffled prefix of 0 … id_pool − 1 (Fisher–Yates)
    std::vector<std::int64_t> ids(static_cast<size_t>(s.id_pool));
    std::iota(ids.begin(), ids.end(), 0);
    for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.bits() % i]);
    for (Eigen::Index i = 0; i < p.batch.input_ids.size(); ++i)
      p.batch.input_ids.data()[i] = ids[static_cast<size_t>(i)];
  }
  p.layout = s.layout;
  p.options = s.options;
  return p;
}

std::string describe(const ParallelLayout& l) {
  std::ostringstream os;
  os << "world=" << l.world << " tp=" << l.tp << " cp=" << l.cp << " dp=" << l.dp() << " ep=" << l.ep
     << " etp=" << l.etp << " edp=" << l.edp();
  if (l.pp > 1) os << " pp=" << l.pp;
  if (l.vpp > 1) os << " vpp=" << l.vpp;
  if (l.gtp > 1 || l.egtp > 1) os << " gtp=" << l.gtp << " egtp=" << l.egtp;
  return os.str();
}

std::string describe(const Scenario& s) {
  const MoeConfig& c = s.config.layer;
  std::ostringstream os;
  os << describe(s.layout) << " | " << dist::to_string(s.options.dispatcher) << " " << to_string(s.options.mode)
     << " b=" << s.options.micro_batch << " m=" << s.num_microbatches() << " S=" << s.seq << " B=" << s.sequences
     << " | E=" << c.num_experts << " k=" << c.topk << " h=" << c.hidden << " d=" << c.ffn_hidden << " "
     << to_string(c.score_function) << (c.pre_softmax ? "(pre)" : "")
     << (c.normalization == Normalization::deepseek ? " deepseek-norm" : "");
  if (c.topk_scaling_factor != 1.0) os << " alpha=" << c.topk_scaling_factor;
  if (c.expert_bias) os << " bias" << (c.bias_update_rate ? "+update" : "") << (s.cold_experts ? "(cold last rank)" : "");
  if (c.num_groups > 0) os << " groups=" << c.num_groups << "/" << c.group_topk;
  if (c.swiglu_clamp) os << " clamp=" << *c.swiglu_clamp;
  if (c.has_shared_expert())
    os << " shared=" << c.shared_expert_ffn_hidden << (c.shared_expert_gate ? "+gate" : "")
       << (c.shared_expert_clamp ? "+clamp" : "");
  if (c.latent_size > 0) os << " latent=" << c.latent_size;
  if (c.apply_probs_on_input) os << " probs-on-input";
  if (c.capacity_factor)
    os << " capacity=" << *c.capacity_factor << "/" << to_string(c.drop_policy) << (c.pad_to_capacity ? "+pad" : "");
  if (c.aux_loss_type != AuxLossType::none) os << " " << to_string(c.aux_loss_type) << "=" << c.aux_loss_coeff;
  if (c.z_loss_coeff > 0) os << " z=" << c.z_loss_coeff;
  if (s.config.mtp_depth > 0) os << " mtp=" << s.config.mtp_depth << "x" << s.config.mtp_loss_scale;
  if (s.config.has_attention())
    os << " attention=" << s.config.attention.heads << "/" << s.config.attention.groups << "x"
       << s.config.attention.head_dim << "(" << dist::to_string(s.options.kv_exchange) << ")";
  os << " | layers=" << s.config.num_layers << " hash=" << s.config.n_hash_layers << " V=" << s.config.vocab
     << " ids<" << s.id_pool << (s.distinct_ids ? " distinct" : "");
  if (!s.padded.empty()) {
    os << " padded=[";
    for (size_t i = 0; i < s.padded.size(); ++i) os << (i ? "," : "") << s.padded[i];
    os << "]";
  }
  if (!c.semantics.intended()) os << " semantics=" << c.semantics.spec();
  os << " seeds=" << s.param_seed << "/" << s.batch_seed;
  return os.str();
}

void showValue(const Scenario& s, std::ostream& os) { os << describe(s); }

}  // namespace moe::proptest
