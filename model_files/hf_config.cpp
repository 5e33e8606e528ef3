#include "model_files/hf_config.hpp"

#include "model_files/hf_keys.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>

namespace moe::model_files {
namespace {

using nlohmann::json;

using hf::HfKeys;
using hf::quoted;
using hf::show;

constexpr const char* kClassDefault = "the HF config class's default";

// Every model's experts are SwiGLU: down(silu(gate(x)) * up(x)), the oracle's expert; no other activation maps.
enum class Activation { silu };
constexpr Named<Activation> kActivations[] = {{Activation::silu, "silu"}};

void check_activation(HfKeys& k) {
  k.choice_or<Activation>("hidden_act", Activation::silu, kClassDefault, kActivations);
}

// DeepSeek's topk_method: top-k over all experts, over the best groups by their best score, or (noaux_tc) over the
// best groups by the sum of their top-2 score + bias, selecting by score + bias.
enum class TopkMethod { greedy, group_limited_greedy, noaux_tc };
constexpr Named<TopkMethod> kTopkMethods[] = {{TopkMethod::greedy, "greedy"},
                                              {TopkMethod::group_limited_greedy, "group_limited_greedy"},
                                              {TopkMethod::noaux_tc, "noaux_tc"}};

// The layer's shape, under the model type's key names for the expert count and width; the experts' activation
// checked.
void read_expert_shape(HfKeys& k, MoeConfig& c, const char* experts_key, const char* width_key) {
  c.hidden = k.integer("hidden_size");
  c.num_experts = k.integer(experts_key);
  c.topk = k.integer("num_experts_per_tok");
  c.ffn_hidden = k.integer(width_key);
  check_activation(k);
}

// Router jitter multiplies the router input by noise while training: not modelled (only Mixtral's class has it;
// elsewhere the key is read the same way, so that a jitter is never ignored).
void check_jitter(HfKeys& k, bool mixtral) {
  const json* v = k.find("router_jitter_noise");
  if (!v) {
    if (mixtral) k.number_or("router_jitter_noise", 0.0, "MixtralConfig's default: no jitter");
    return;
  }
  const double jitter = k.number("router_jitter_noise", *v);
  if (jitter != 0.0)
    throw std::invalid_argument("'router_jitter_noise' is " + show(*v) +
                                ": noise on the router input is not modelled (only 0 maps)");
  k.ignore("router_jitter_noise", "no jitter");
}

// Qwen and Mixtral: HF's load_balancing_loss_func, as Megatron's aux loss.
void map_hf_aux(HfKeys& k, ModelFile& out, int layers) {
  MoeConfig& c = out.model.config;
  const double coef = k.number_or("router_aux_loss_coef", 0.001, kClassDefault);
  if (coef < 0) throw std::invalid_argument("'router_aux_loss_coef' must be >= 0, got " + show(json(coef)));
  if (coef == 0) return;
  c.aux_loss_type = AuxLossType::aux;
  c.aux_loss_coeff = coef;
  out.assumptions.push_back(
      "router_aux_loss_coef " + show(json(coef)) +
      " -> aux with that coeff: HF's load_balancing_loss_func pools the router logits of all layers and the whole "
      "batch into one statistic, E·Σ_e f_e·P_e (f_e the fraction of tokens routed to e); Megatron's aux, modelled "
      "here, is per layer and micro-batch, E/k·Σ_e f_e·P_e, summed over the layers. The coefficient is taken as "
      "is: with equal statistics in every layer the total is L/k = " +
      std::to_string(layers) + "/" + std::to_string(c.topk) + " times HF's");
}

// What no Hugging Face config says because none of these models has it.
void note_absent_options(ModelFile& out) {
  out.assumptions.push_back(std::string("dropless (no capacity factor), no z-loss, ") +
                            (out.model.config.swiglu_clamp ? "" : "no SwiGLU clamp, ") +
                            "no latent projection, semantics intended: HF's MoE blocks have none of these");
  out.assumptions.push_back("seq " + std::to_string(kDefaultSeq) + ", micro-batch " +
                            std::to_string(kDefaultMicroBatch) +
                            ": a config.json has no training shape (max_position_embeddings is the context limit)");
}

// Qwen2-MoE and Qwen3-MoE (Qwen2MoeSparseMoeBlock / Qwen3MoeSparseMoeBlock): softmax over all experts, top-k, and
// with norm_topk_prob the k probabilities divided by their sum.
void map_qwen(HfKeys& k, ModelFile& out, bool qwen2) {
  MoeConfig& c = out.model.config;
  read_expert_shape(k, c, "num_experts", "moe_intermediate_size");
  // A block is an MoE block when (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers.
  const int step = k.integer_or("decoder_sparse_step", 1, kClassDefault);
  if (step != 1)
    throw std::invalid_argument("'decoder_sparse_step' is " + std::to_string(step) +
                                ": dense blocks between the MoE blocks are not modelled (only 1 maps)");
  if (const json* dense = k.find("mlp_only_layers")) {
    if (!dense->is_array()) throw std::invalid_argument("'mlp_only_layers' must be a list, got " + show(*dense));
    if (!dense->empty())
      throw std::invalid_argument("'mlp_only_layers' is " + show(*dense) +
                                  ": dense blocks among the MoE blocks are not modelled (only [] maps)");
  } else {
    out.assumptions.push_back("mlp_only_layers absent: taken as [] (" + std::string(kClassDefault) + ")");
  }
  // Renormalised top-k of a softmax = the softmax over the chosen logits: Megatron's post-softmax, exactly (no
  // epsilon). Without renormalisation the weights are the full softmax's: pre-softmax.
  c.pre_softmax = !k.boolean("norm_topk_prob");
  if (qwen2) {
    // Qwen2-MoE adds sigmoid(shared_expert_gate(x)) · shared_expert(x), the gate a bias-free Linear(h, 1): the
    // oracle's shared_expert_gate, y += σ(w_g·x)·F_s(x) with w_g [1, h].
    const int shared = k.integer("shared_expert_intermediate_size");
    if (shared < 0) throw std::invalid_argument("'shared_expert_intermediate_size' must be >= 0");
    c.shared_expert_ffn_hidden = shared;
    c.shared_expert_gate = shared > 0;
  }
  out.model.num_layers = k.integer("num_hidden_layers");
  map_hf_aux(k, out, out.model.num_layers);
  check_jitter(k, false);
  out.model.vocab = k.integer("vocab_size");
}

// Mixtral (MixtralSparseMoeBlock): softmax over all experts, top-k, always renormalised: post-softmax.
void map_mixtral(HfKeys& k, ModelFile& out) {
  MoeConfig& c = out.model.config;
  read_expert_shape(k, c, "num_local_experts", "intermediate_size");
  c.pre_softmax = false;
  out.model.num_layers = k.integer("num_hidden_layers");
  map_hf_aux(k, out, out.model.num_layers);
  check_jitter(k, true);
  out.model.vocab = k.integer("vocab_size");
}

// DeepSeek-V2 and -V3 (MoEGate of their modeling_deepseek.py). HF's V3 code implements only noaux_tc and no loss
// (it is inference code); the other topk_methods follow V2's, which both types may name.
void map_deepseek(HfKeys& k, ModelFile& out, bool v3, bool transformers_v2_gate) {
  MoeConfig& c = out.model.config;
  // An absent key takes the default of transformers 5.25's config class for the model type (the pinned reference,
  // which builds the block from these files): DeepseekV3Config or DeepseekV2Config. DeepSeek's own
  // configuration_deepseek.py (the files' auto_map) has other defaults; a key set in the file is what it says.
  const std::string class_default = v3 ? "transformers 5.25's DeepseekV3Config default"
                                       : "transformers 5.25's DeepseekV2Config default";
  read_expert_shape(k, c, "n_routed_experts", "moe_intermediate_size");
  // Block l is an MoE block when l >= first_k_dense_replace and l % moe_layer_freq == 0.
  const int freq = k.integer_or("moe_layer_freq", 1, kClassDefault);
  if (freq != 1)
    throw std::invalid_argument("'moe_layer_freq' is " + std::to_string(freq) +
                                ": dense blocks between the MoE blocks are not modelled (only 1 maps)");

  // The routing rule is never guessed: scoring_func, topk_method and norm_topk_prob are required.
  c.score_function = k.choice<ScoreFunction>("scoring_func", kScoreFunctionNames);
  const std::string scoring(to_string(c.score_function));
  const TopkMethod method = k.choice<TopkMethod>("topk_method", kTopkMethods);
  const bool norm = k.boolean("norm_topk_prob");
  const double scale = k.number_or("routed_scaling_factor", v3 ? 2.5 : 1.0, class_default);

  if (!v3 && transformers_v2_gate) {
    // Deviation v2-gate-softmax-scaled: transformers' V2 gate reads neither key.
    c.score_function = ScoreFunction::softmax;
    c.pre_softmax = true;
    c.topk_scaling_factor = scale;
    out.assumptions.push_back("v2-gate-softmax-scaled (the semantics): the gate as transformers 5.25 computes it, "
                              "softmax scores, the top k not renormalised, times routed_scaling_factor " +
                              show(json(scale)) + "; norm_topk_prob " + show(json(norm)) + " and scoring_func " +
                              quoted(scoring) + " not applied");
  } else {
    // The gate renormalises only when top_k > 1 and norm_topk_prob, dividing by Σ + 1e-20.
    const bool renormalised = norm && c.topk > 1;
    if (c.score_function == ScoreFunction::softmax) {
      // Renormalised softmax top-k = the softmax over the chosen logits (post-softmax); else the full softmax's
      // values.
      c.pre_softmax = !norm;
      if (renormalised)
        out.assumptions.push_back(
            "norm_topk_prob true with softmax -> post-softmax (softmax over the chosen logits); "
            "DeepSeek divides the top-k probabilities by their sum + 1e-20, a relative "
            "difference below 1e-20");
    } else {
      // Megatron's normalisation is DeepSeek's HF gate's: s_I / (Σ s_I + 1e-20) when k > 1, s itself when k = 1.
      if (!norm && c.topk > 1)
        throw std::invalid_argument("'norm_topk_prob' is false with scoring_func " + quoted(scoring) +
                                    ": unnormalised " + scoring +
                                    " weights are not modelled (the oracle renormalises over the top-k when k > 1)");
      c.normalization = Normalization::megatron;
    }
    // V2's gate scales only the weights it did not renormalise; V3's scales always ("must multiply the scaling
    // factor").
    if (!v3 && renormalised) {
      c.topk_scaling_factor = 1.0;
      if (scale != 1.0)
        out.assumptions.push_back("routed_scaling_factor " + show(json(scale)) +
                                  " not applied: DeepSeek-V2's gate multiplies only the weights it does not "
                                  "renormalise (norm_topk_prob true, k > 1)");
    } else {
      c.topk_scaling_factor = scale;
    }
  }

  // Groups. The oracle, as Megatron, scores a group by the sum of its top k/group_topk ranking scores; DeepSeek's
  // noaux_tc by the sum of its top 2 (score + bias), group_limited_greedy by its best score. They agree only when
  // k/topk_group is 2, respectively 1.
  if (method == TopkMethod::greedy) {
    k.ignore("n_group", "topk_method \"greedy\" selects among all experts");
    k.ignore("topk_group", "topk_method \"greedy\" selects among all experts");
  } else {
    std::optional<int> groups = k.optional_integer("n_group");
    if (!groups && v3) groups = k.integer_or("n_group", 8, class_default);
    if (!groups || *groups <= 1) {
      out.assumptions.push_back("n_group " + (groups ? std::to_string(*groups) : std::string("absent")) +
                                ": one group, no group-limited routing" +
                                (groups ? std::string() : " (" + class_default + ")"));
      k.ignore("topk_group", "one group");
    } else {
      const int kept = v3 ? k.integer_or("topk_group", 4, class_default) : k.integer("topk_group");
      const int counted = method == TopkMethod::noaux_tc ? 2 : 1;
      if (kept <= 0 || c.topk % kept != 0 || c.topk / kept != counted)
        throw std::invalid_argument("'topk_group' is " + std::to_string(kept) + " with num_experts_per_tok " +
                                    std::to_string(c.topk) + ": topk_method " +
                                    quoted(std::string(name_of(method, kTopkMethods))) +
                                    " scores a group by its top " + std::to_string(counted) +
                                    " expert(s), the oracle (as Megatron) by its top k/topk_group; only topk_group = " +
                                    std::to_string(c.topk / counted) + " maps");
      c.num_groups = *groups;
      c.group_topk = kept;
    }
  }
  if (method == TopkMethod::noaux_tc) {
    if (c.score_function == ScoreFunction::softmax)
      throw std::invalid_argument(
          "'topk_method' is \"noaux_tc\" with scoring_func \"softmax\": the bias-balanced "
          "gate is modelled for sigmoid and sqrtsoftplus only");
    c.expert_bias = true;
    c.bias_update_rate = 1e-3;
    out.assumptions.push_back(
        "bias_update_rate 0.001: topk_method \"noaux_tc\" selects by score + "
        "e_score_correction_bias, a bias trained at DeepSeek-V3's update speed 0.001 (the "
        "paper's; config.json does not say)");
  }

  // DeepseekMLP(intermediate_size = moe_intermediate_size · n_shared_experts), added ungated. HF builds it only
  // when the key is set.
  const int shared = k.integer_or("n_shared_experts", v3 ? 1 : 2, class_default);
  if (shared < 0) throw std::invalid_argument("'n_shared_experts' must be >= 0");
  // The product in 64 bits: in int, 2^21 × 2048 wraps to 0 and the shared expert would vanish without a word.
  const std::int64_t shared_width = std::int64_t{shared} * c.ffn_hidden;
  if (shared_width > std::numeric_limits<int>::max())
    throw std::invalid_argument("'n_shared_experts' " + std::to_string(shared) + " × 'moe_intermediate_size' " +
                                std::to_string(c.ffn_hidden) + " = " + std::to_string(shared_width) +
                                ": the shared expert's width must be at most 2^31 - 1");
  c.shared_expert_ffn_hidden = static_cast<int>(shared_width);
  out.model.shared_experts = shared;

  // The balance loss: per layer, f_e = E/(k·T)·count_e, as Megatron's aux (seq_aux: per sequence, then the mean).
  const double alpha = k.number_or("aux_loss_alpha", 0.0, "no balance loss");
  if (alpha < 0) throw std::invalid_argument("'aux_loss_alpha' must be >= 0");
  if (alpha > 0) {
    const bool seq = k.boolean_or("seq_aux", true, kClassDefault);
    c.aux_loss_type = seq ? AuxLossType::seq_aux : AuxLossType::aux;
    c.aux_loss_coeff = alpha;
    if (method != TopkMethod::greedy)
      out.assumptions.push_back(
          std::string("aux_loss_alpha -> ") + (seq ? "seq_aux" : "aux") +
          ": DeepSeek counts each token's actual selection (with the groups" +
          (method == TopkMethod::noaux_tc ? " and the bias" : "") +
          "); the oracle's aux map, as Megatron's, is the plain top-k of the normalised "
          "scores" +
          (v3 ? " (HF's V3 code computes no loss; this is the V3 paper's sequence-wise one)" : ""));
  } else {
    k.ignore("seq_aux", "no balance loss (aux_loss_alpha 0)");
  }

  const int layers = k.integer("num_hidden_layers");
  const int dense = k.integer_or("first_k_dense_replace", v3 ? 3 : 0, class_default);
  if (dense < 0 || dense >= layers)
    throw std::invalid_argument("'first_k_dense_replace' is " + std::to_string(dense) + " with num_hidden_layers " +
                                std::to_string(layers) + ": no MoE block left");
  out.model.num_dense_layers = dense;
  out.model.num_layers = layers - dense;
  check_jitter(k, false);
  out.model.vocab = k.integer("vocab_size");
}

// DeepSeek-V4 (the inference code's Gate / Expert / MoE, and transformers' DeepseekV4SparseMoeBlock): sqrt-softplus
// scores, top-k of score + bias (noaux_tc), weights ρ·s_I/Σ s_I, the routed experts' SwiGLU clamped at swiglu_limit,
// one unclamped shared expert, and the first layers routed by a tid2eid table (hash layers). No groups.
void map_deepseek_v4(HfKeys& k, ModelFile& out) {
  MoeConfig& c = out.model.config;
  read_expert_shape(k, c, "n_routed_experts", "moe_intermediate_size");

  c.score_function =
      k.choice_or<ScoreFunction>("scoring_func", ScoreFunction::sqrtsoftplus, kClassDefault, kScoreFunctionNames);
  if (c.score_function == ScoreFunction::softmax)
    throw std::invalid_argument("'scoring_func' is \"softmax\": DeepSeek-V4's bias-balanced gate is modelled for "
                                "sigmoid and sqrtsoftplus only");
  // DeepSeek-V4's gate is noaux_tc: no other method maps.
  constexpr Named<TopkMethod> kV4Methods[] = {{TopkMethod::noaux_tc, "noaux_tc"}};
  k.choice_or<TopkMethod>("topk_method", TopkMethod::noaux_tc, "DeepSeek-V4's gate: top-k of score + bias",
                          kV4Methods);
  if (!k.boolean_or("norm_topk_prob", true, kClassDefault) && c.topk > 1)
    throw std::invalid_argument("'norm_topk_prob' is false: DeepSeek-V4 always divides by the sum of the top-k "
                                "scores (unnormalised weights are not modelled)");
  c.normalization = Normalization::megatron;
  out.assumptions.push_back("norm_topk_prob -> the weights s_I / Σ s_I as Megatron's (Σ + 1e-20); DeepSeek's "
                            "inference code divides without the epsilon, transformers with it: a relative difference "
                            "below 1e-20");
  c.topk_scaling_factor = k.number_or("routed_scaling_factor", 1.5, kClassDefault);
  c.expert_bias = true;
  c.bias_update_rate = 1e-3;
  out.assumptions.push_back("bias_update_rate 0.001: the V4 paper's bias update speed (config.json does not say)");
  k.ignore("n_group", "DeepSeek-V4 has no group-limited routing");
  k.ignore("topk_group", "DeepSeek-V4 has no group-limited routing");

  const double limit = k.number_or("swiglu_limit", 10.0, kClassDefault);
  if (limit < 0) throw std::invalid_argument("'swiglu_limit' must be >= 0, got " + show(json(limit)));
  // transformers 5.25 clamps whatever the limit is (DeepseekV4Experts._apply_gate has no "if limit"), so 0 is a clamp
  // at 0, gate ≤ 0 and up = 0: the routed experts output 0. Mapping it to "no clamp" made a captured block fail.
  c.swiglu_clamp = limit;
  c.shared_expert_clamp = false;
  out.assumptions.push_back("swiglu_limit clamps the routed experts only (up to ±limit, gate ≤ limit), as "
                            "DeepSeek's inference code; transformers 5.25 clamps the shared expert too");
  if (limit == 0)
    out.assumptions.push_back("swiglu_limit 0 -> a clamp at 0, as transformers 5.25 applies it: up is 0, so every "
                              "routed expert outputs 0");

  const int n_shared = k.integer_or("n_shared_experts", 1, kClassDefault);
  const std::int64_t shared = static_cast<std::int64_t>(n_shared) * c.ffn_hidden;
  if (shared < 0 || shared > std::numeric_limits<int>::max())
    throw std::invalid_argument("'n_shared_experts' × 'moe_intermediate_size' = " + std::to_string(shared) +
                                ": not a width the oracle holds (0 … 2^31 − 1)");
  c.shared_expert_ffn_hidden = static_cast<int>(shared);
  out.model.shared_experts = n_shared;

  const int layers = k.integer("num_hidden_layers");
  // Hash layers: num_hash_layers (the released config.json), or the leading "hash_moe" of mlp_layer_types.
  int hash = 0;
  if (const json* types = k.find("mlp_layer_types")) {
    if (!types->is_array() || static_cast<int>(types->size()) != layers)
      throw std::invalid_argument("'mlp_layer_types' must list num_hidden_layers entries, got " + show(*types));
    enum class MlpType { hash_moe, moe };
    constexpr Named<MlpType> kMlpTypes[] = {{MlpType::hash_moe, "hash_moe"}, {MlpType::moe, "moe"}};
    bool leading = true;
    for (const json& t : *types) {
      const auto type = t.is_string() ? find_named<MlpType>(t.get<std::string>(), kMlpTypes) : std::nullopt;
      if (!type)
        throw std::invalid_argument("'mlp_layer_types' entries are \"hash_moe\" or \"moe\", got " + show(t));
      const bool hashed = *type == MlpType::hash_moe;
      if (hashed && !leading)
        throw std::invalid_argument("'mlp_layer_types' has a hash layer after a routed one: the oracle's hash "
                                    "layers are the first ones");
      leading = leading && hashed;
      hash += hashed;
    }
    k.ignore("num_hash_layers", "mlp_layer_types says which layers are hash layers");
  } else {
    hash = k.integer_or("num_hash_layers", 3, "transformers' DeepseekV4Config default");
  }
  if (hash < 0 || hash > layers)
    throw std::invalid_argument("'num_hash_layers' is " + std::to_string(hash) + " with num_hidden_layers " +
                                std::to_string(layers));
  out.model.num_layers = layers;
  out.model.n_hash_layers = hash;

  // transformers computes its pooled load-balancing loss only with output_router_logits, which V4 configs leave
  // false; DeepSeek's own balance loss (sequence-wise, α = 0.0001 in the paper) is not in config.json.
  const bool logits = k.boolean_or("output_router_logits", false, kClassDefault);
  if (logits) {
    map_hf_aux(k, out, layers);
  } else {
    k.ignore("router_aux_loss_coef", "output_router_logits is false: transformers computes no aux loss");
    out.assumptions.push_back("no balance loss: output_router_logits is false (transformers computes none) and "
                              "config.json does not give DeepSeek's sequence-wise α (0.0001 in the V4 paper; set it "
                              "with --moe-aux-loss-coeff and --moe-router-load-balancing-type seq_aux)");
  }
  check_jitter(k, false);
  out.model.vocab = k.integer("vocab_size");
}

std::string describe(const std::string& type, const std::string& name, const LayerPreset& m) {
  const MoeConfig& c = m.config;
  std::string s =
      type + " from " + name + ": h " + std::to_string(c.hidden) + ", " + std::to_string(c.num_experts) + " experts";
  if (c.num_groups > 0) s += " in " + std::to_string(c.num_groups) + " groups keep " + std::to_string(c.group_topk);
  s += ", top-" + std::to_string(c.topk) + ", ffn " + std::to_string(c.ffn_hidden);
  if (c.has_shared_expert()) s += ", shared " + std::to_string(c.shared_expert_ffn_hidden);
  s += ", " + std::to_string(m.num_layers) + " MoE layers";
  if (m.n_hash_layers > 0) s += " (the first " + std::to_string(m.n_hash_layers) + " hash-routed)";
  if (m.num_dense_layers > 0) s += " after " + std::to_string(m.num_dense_layers) + " dense";
  return s;
}

}  // namespace

ModelFile model_from_hf_config(const json& root, const std::string& name, const Semantics& semantics) {
  ModelFile out;
  HfKeys k(root, out);
  const HfModelType type = k.choice<HfModelType>("model_type", kHfModelTypes);
  switch (type) {
    case HfModelType::qwen2_moe:
    case HfModelType::qwen3_moe: map_qwen(k, out, type == HfModelType::qwen2_moe); break;
    case HfModelType::mixtral: map_mixtral(k, out); break;
    case HfModelType::deepseek_v2:
    case HfModelType::deepseek_v3:
      map_deepseek(k, out, type == HfModelType::deepseek_v3, semantics.has(Deviation::v2_gate_softmax_scaled));
      break;
    case HfModelType::deepseek_v4: map_deepseek_v4(k, out); break;
  }
  // Biases on the expert (and shared expert) projections would change the layer: refused in every family (an
  // absent key is no bias, every family's class default, and not worth a note).
  if (const json* bias = k.find("mlp_bias"); bias && k.boolean("mlp_bias"))
    throw std::invalid_argument("'mlp_bias' is true: experts with biases are not modelled");
  note_absent_options(out);
  const std::string type_name(name_of(type, kHfModelTypes));
  k.report_rest(type_name);
  out.source = "Hugging Face config.json (" + type_name + ")";
  out.model.name = name;
  out.model.seq = kDefaultSeq;
  out.model.batch = kDefaultMicroBatch;
  out.model.description = describe(type_name, name, out.model);
  try {
    out.model.config.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("the mapped MoE layer is refused: ") + e.what());
  }
  return out;
}

}  // namespace moe::model_files
