#include "proptests/generators.hpp"

#include <algorithm>
#include <numeric>

namespace moe::proptest {
namespace {

using rc::gen::element;
using rc::gen::inRange;

// A uniformly chosen entry of `options` (non-empty), shrinking toward the first.
template <typename T>
T pick(const std::vector<T>& options) {
  return options[static_cast<size_t>(*inRange<size_t>(0, options.size()))];
}

// The expert mesh for a world and a config: etp dividing world and ffn_hidden, ep dividing E and world/etp (and
// leaving at least `min_local` experts per rank).
void expert_mesh(ParallelLayout& l, int num_experts, int ffn_hidden, bool replicas = false, int min_local = 1) {
  // etp 1, 2, 4 weighted 5 : 2 : 1 (each value repeated by its weight; shrinking goes to the first).
  std::vector<int> etp;
  for (auto [v, weight] : {std::pair{1, 5}, std::pair{2, 2}, std::pair{4, 1}})
    if (l.world % v == 0 && ffn_hidden % v == 0 && (v == 1 || !replicas))
      etp.insert(etp.end(), static_cast<size_t>(weight), v);
  l.etp = pick(etp);
  std::vector<int> ep;
  for (int v = 1; v <= l.world / l.etp; ++v)
    if ((l.world / l.etp) % v == 0 && num_experts % v == 0 && num_experts / v >= min_local && (v > 1 || !replicas))
      ep.push_back(v);
  if (min_local > 1 && ep.size() > 1 && weighted<bool>({{1, false}, {3, true}})) ep.erase(ep.begin());  // EP ≥ 2
  l.ep = pick(ep);
}

void router(MoeConfig& c, const ScenarioShape& shape) {
  c.score_function = shape.bias_update ? *element(ScoreFunction::sigmoid, ScoreFunction::sqrtsoftplus)
                                       : *element(ScoreFunction::sigmoid, ScoreFunction::softmax,
                                                  ScoreFunction::sqrtsoftplus);
  const bool softmax = c.score_function == ScoreFunction::softmax;
  c.pre_softmax = softmax && (c.topk == 1 || *rc::gen::arbitrary<bool>());
  c.expert_bias = !softmax && (shape.bias_update || *rc::gen::arbitrary<bool>());
  if (c.expert_bias && (shape.bias_update || *rc::gen::arbitrary<bool>())) c.bias_update_rate = 1e-3;
  c.normalization = *element(Normalization::megatron, Normalization::deepseek);
  c.topk_scaling_factor = *element(1.0, 2.5);
  if (weighted<bool>({{3, false}, {1, true}})) {
    std::vector<std::pair<int, int>> groups;  // (num_groups, group_topk) that validate
    for (int g = 2; g <= c.num_experts; ++g)
      for (int gk = 1; gk <= g; ++gk) {
        MoeConfig trial = c;
        trial.num_groups = g;
        trial.group_topk = gk;
        try {
          trial.validate();
          groups.push_back({g, gk});
        } catch (const std::invalid_argument&) {
        }
      }
    if (!groups.empty()) std::tie(c.num_groups, c.group_topk) = pick(groups);
  }
}

void experts(MoeConfig& c, int tp) {
  const double clamp = weighted<double>({{3, 0.0}, {1, 0.5}, {1, 3.0}});
  if (clamp > 0) c.swiglu_clamp = clamp;
  c.shared_expert_ffn_hidden = 2 * tp * weighted<int>({{1, 0}, {2, 1}, {1, 2}});
  c.shared_expert_gate = c.has_shared_expert() && *rc::gen::arbitrary<bool>();
  c.shared_expert_clamp = c.has_shared_expert() && c.swiglu_clamp && *rc::gen::arbitrary<bool>();
  c.latent_size = weighted<int>({{3, 0}, {1, 3}});
  c.apply_probs_on_input = c.topk == 1 && weighted<bool>({{3, false}, {1, true}});
}

void capacity(MoeConfig& c, const ScenarioShape& shape) {
  const double factor = shape.dropless   ? 0.0
                        : shape.capacity ? *element(0.5, 1.0, 1.5)
                                         : weighted<double>({{3, 0.0}, {1, 0.5}, {1, 1.0}, {1, 1.5}});
  if (factor == 0) return;
  c.capacity_factor = factor;
  c.drop_policy = *element(DropPolicy::probs, DropPolicy::position);
  c.pad_to_capacity = *rc::gen::arbitrary<bool>();
}

void losses(MoeConfig& c, const ScenarioShape& shape) {
  // Megatron's seq_aux rule shows only with micro-batch ≥ 2 and padding: draw it more often there.
  const int seq_aux = shape.megatron ? 3 : 1;
  c.aux_loss_type = weighted<AuxLossType>({{2, AuxLossType::none},
                                           {1, AuxLossType::aux},
                                           {seq_aux, AuxLossType::seq_aux},
                                           {1, AuxLossType::global_aux}});
  c.aux_loss_coeff = c.aux_loss_type == AuxLossType::none ? 0.0 : 0.1;
  c.z_loss_coeff = *element(0.0, 0.01);
}

}  // namespace

rc::Gen<Scenario> scenarios(const ScenarioShape& shape) {
  return rc::gen::exec([shape] {
    Scenario s;
    // Dense mesh: world = tp·cp·gtp·dp ≤ 32.
    ParallelLayout& l = s.layout;
    l.tp = shape.gtp ? weighted<int>({{6, 1}, {3, 2}}) : weighted<int>({{6, 1}, {3, 2}, {1, 4}});
    l.cp = weighted<int>({{5, 1}, {2, 2}});
    l.gtp = shape.gtp ? 2 : 1;
    const int dp = shape.gtp        ? weighted<int>({{4, 1}, {4, 2}})
                   : shape.replicas || shape.waves ? weighted<int>({{4, 2}, {1, 4}})  // room for EP ≥ 2
                                    : weighted<int>({{4, 1}, {4, 2}, {1, 4}});
    l.world = l.tp * l.cp * l.gtp * dp;

    MoeConfig& c = s.config.layer;
    c.num_experts = shape.waves      ? weighted<int>({{1, 2}, {3, 4}, {3, 8}})  // ≥ 2 local experts, top-3
                    : shape.replicas ? weighted<int>({{3, 2}, {3, 4}, {2, 8}})  // EP ≥ 2 needs E ≥ 2
                                    : weighted<int>({{3, 2}, {3, 4}, {3, 8}, {1, 1}, {1, 6}});
    // Waves reorder nothing only if the combine keeps the unwaved order: tokens with three experts in two waves
    // are what would show it.
    c.topk = shape.waves ? std::min(c.num_experts, weighted<int>({{3, 3}, {1, 2}}))
                         : *inRange(1, std::min(c.num_experts, 3) + 1);
    c.hidden = *element(4, 8);
    c.ffn_hidden = *element(2, 4, 8);
    expert_mesh(l, c.num_experts, c.ffn_hidden, shape.replicas, shape.waves ? 2 : 1);
    if (shape.gtp && (l.world / (l.etp * l.ep)) % 2 == 0) l.egtp = *element(2, 1);
    router(c, shape);
    experts(c, l.tp);
    capacity(c, shape);
    losses(c, shape);

    s.config.num_layers = *element(1, 2);
    s.config.n_hash_layers = shape.hash_layers ? *inRange(1, s.config.num_layers + 1)
                                               : std::min(s.config.num_layers,
                                                          weighted<int>({{3, 0}, {1, 1}}));
    s.config.vocab = *element(16, 8);
    if (shape.megatron) {
      // The profiles as a training script runs them, and as a loop that hands the router its padding mask (not
      // for 0.19 with a bias update: megatron-core 0.19.2 raises there, bias-counts-mask-broadcast).
      // The API-user variant first: small draws favour it, and it shows the most rules (its router sees padding).
      std::vector<std::string> profiles{"megatron-main,-router-counts-padding", "megatron-core-0.19", "megatron-main"};
      if (!c.bias_update_rate) profiles.push_back("megatron-core-0.19,-router-counts-padding");
      c.semantics = Semantics::parse(pick(profiles));
      if (*rc::gen::arbitrary<bool>()) c.semantics = c.semantics.with(Deviation::fused_swiglu_ignores_clamp, true);
    }
    s.config.validate();

    s.options.dispatcher = shape.dispatcher ? *shape.dispatcher
                                            : *rc::gen::elementOf(all_values<dist::DispatcherKind>());
    s.options.mode = shape.mode  ? *shape.mode
                     : shape.gtp ? *element(LossMode::sum, LossMode::per_token)
                                 : *element(LossMode::sum, LossMode::avg, LossMode::per_token);
    s.options.micro_batch = shape.hash_layers ? *element(2, 3)
                            : shape.megatron  ? weighted<int>({{1, 1}, {2, 2}})
                                              : weighted<int>({{3, 1}, {2, 2}});
    const int m = weighted<int>({{3, 1}, {2, 2}});
    s.sequences = s.options.micro_batch * dp * l.gtp * m;
    s.seq = (l.cp > 1 ? 2 * l.cp * l.tp : l.tp) * weighted<int>({{3, 1}, {2, 2}, {1, 3}});

    if (!shape.no_padding && (shape.megatron || weighted<bool>({{2, false}, {1, true}}))) {
      for (int b = 0; b < s.sequences; ++b) s.padded.push_back(weighted<int>({{1, 0}, {1, 1}, {1, s.seq}}));
      if (s.valid_tokens() == 0) s.padded[0] = 0;  // per-token loss needs a valid token
    }
    // A pool of 1–2 ids sends every token to the same experts (hot experts, idle ranks), unless capacity by
    // probability would then rank exact ties of identical tokens.
    // Ids drawn with replacement repeat too: two equal ids are two bitwise equal rows at the first layer, and after it
    // two rows whose last bits depend on where a GEMM put them, so dropping by probability would rank rounding (the
    // oracle keeps the earlier row of an exact tie, the parallel system the one an ulp higher). With ties that matter
    // every token gets its own id, the vocabulary enlarged to the batch where needed (no other draw changes).
    const bool ties_matter = c.capacity_factor && c.drop_policy == DropPolicy::probs;
    s.id_pool = ties_matter      ? s.config.vocab
                : shape.replicas ? weighted<int>({{1, s.config.vocab}, {1, 1}, {1, 2}})
                                 : weighted<int>({{3, s.config.vocab}, {1, 1}, {1, 2}});
    if (ties_matter) {
      s.distinct_ids = true;
      s.config.vocab = s.id_pool = std::max(s.config.vocab, s.sequences * s.seq);
    }
    s.cold_experts = c.expert_bias && l.ep > 1 && weighted<bool>({{3, false}, {1, true}});
    s.param_seed = *inRange<std::uint64_t>(0, 1000);
    s.batch_seed = *inRange<std::uint64_t>(0, 1000);
    // The pipeline last, so that every draw above stays as it was: the world grows by pp (dp and edp stay), and
    // two interleaved chunks per rank where the microbatches allow it (m a multiple of pp).
    if (l.world <= 16 && !shape.mtp && !(shape.gtp && l.world > 8)) {  // MTP runs with pp = 1 (its depths need the embedding)
      l.pp = weighted<int>({{5, 1}, {2, 2}});
      if (l.pp == 2 && m % 2 == 0 && *rc::gen::arbitrary<bool>()) l.vpp = 2;
      l.world *= l.pp;
      s.config.num_layers = std::max(s.config.num_layers, l.pp * l.vpp);
      s.config.validate();
    }
    if (shape.mtp) {
      s.config.mtp_depth = weighted<int>({{3, 1}, {1, 2}});
      s.config.mtp_loss_scale = *element(0.3, 1.0);
    }
    if (shape.attention || (shape.mtp && *rc::gen::arbitrary<bool>())) {
      // Heads over tp: tp divides the key/value groups, which divide the heads (MHA, GQA or MQA per TP rank).
      AttentionConfig& a = s.config.attention;
      a.groups = l.tp * weighted<int>({{2, 1}, {1, 2}});
      a.heads = a.groups * weighted<int>({{2, 1}, {1, 2}});
      a.head_dim = *element(2, 4);
      s.options.kv_exchange = *element(dist::KvExchange::all_gather, dist::KvExchange::p2p);
      s.config.validate();
    }
    return s;
  });
}

rc::Gen<ParallelLayout> dispatch_layouts(int num_experts) {
  return rc::gen::exec([num_experts] {
    ParallelLayout l;
    l.tp = weighted<int>({{4, 1}, {2, 2}, {1, 4}});
    l.world = l.tp * weighted<int>({{2, 1}, {4, 2}, {3, 4}, {1, 8}});
    expert_mesh(l, num_experts, 8);
    return l;
  });
}

}  // namespace moe::proptest
