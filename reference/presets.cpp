#include "reference/presets.hpp"

#include <stdexcept>

namespace moe {
namespace {

// DeepSeek-V4 router and expert options (DeepSeek-V4's published configs and inference model.py: Gate, Expert):
// sqrtsoftplus, bias-balanced, clamp 10, one shared expert, sequence-wise balance loss 1e-4, bias update rate 1e-3.
MoeConfig v4_like(int hidden, int experts, int topk, int ffn, double route_scale) {
  MoeConfig c;
  c.hidden = hidden;
  c.num_experts = experts;
  c.topk = topk;
  c.ffn_hidden = ffn;
  c.score_function = ScoreFunction::sqrtsoftplus;
  c.topk_scaling_factor = route_scale;
  c.expert_bias = true;
  c.bias_update_rate = 1e-3;
  c.swiglu_clamp = 10.0;
  c.shared_expert_ffn_hidden = ffn;
  c.aux_loss_type = AuxLossType::seq_aux;
  c.aux_loss_coeff = 1e-4;
  return c;
}

// DeepSeek-V3: sigmoid, 8 groups keep 4, route scale 2.5, no clamp.
MoeConfig v3_like(int hidden, int experts, int topk, int ffn, int groups, int group_topk) {
  MoeConfig c;
  c.hidden = hidden;
  c.num_experts = experts;
  c.topk = topk;
  c.ffn_hidden = ffn;
  c.score_function = ScoreFunction::sigmoid;
  c.topk_scaling_factor = 2.5;
  c.expert_bias = true;
  c.bias_update_rate = 1e-3;
  c.num_groups = groups;
  c.group_topk = group_topk;
  c.shared_expert_ffn_hidden = ffn;
  c.aux_loss_type = AuxLossType::seq_aux;
  c.aux_loss_coeff = 1e-4;
  return c;
}

std::vector<LayerPreset> make_presets() {
  std::vector<LayerPreset> presets;
  presets.push_back({"tiny-v4", "DeepSeek-V4 options at test size: h 32, 16 experts, top-6, ffn 16",
                     v4_like(32, 16, 6, 16, 1.5), 16, 2, 64});
  {
    // tiny-v4 in pre-norm blocks with causal attention: 4 heads over 2 key/value groups (GQA), head width 8, RoPE.
    LayerPreset p{"tiny-attention", "tiny-v4 in blocks with causal GQA attention: 4 heads, 2 groups, head width 8",
                  v4_like(32, 16, 6, 16, 1.5), 16, 2, 64};
    p.attention = {.heads = 4, .groups = 2, .head_dim = 8};
    presets.push_back(p);
    // With one multi-token-prediction depth at DeepSeek-V3/V4's first loss weight, λ = 0.3.
    p.name = "tiny-mtp";
    p.description = "tiny-attention with one multi-token-prediction depth, loss weight 0.3 (V3/V4)";
    p.mtp_depth = 1;
    p.mtp_loss_scale = 0.3;
    presets.push_back(p);
  }
  presets.push_back({"tiny-v3", "DeepSeek-V3 options at test size: h 32, 16 experts in 4 groups keep 2, top-4",
                     v3_like(32, 16, 4, 16, 4, 2), 16, 2, 64});
  // The main job's other test-size models: between them and tiny-v4/v3, every option of the oracle runs.
  {
    // Sigmoid with DeepSeek's normalisation, 4 groups keep 2 of top-6 (3 per group), capacity by probs with
    // padding, global_aux, z-loss, a shared expert clamped with the routed ones (clamp small enough to bite).
    MoeConfig c = v3_like(32, 16, 6, 16, 4, 2);
    c.normalization = Normalization::deepseek;
    c.capacity_factor = 1.0;
    c.pad_to_capacity = true;
    c.aux_loss_type = AuxLossType::global_aux;
    c.aux_loss_coeff = 1e-2;
    c.z_loss_coeff = 1e-3;
    c.swiglu_clamp = 0.05;
    c.shared_expert_clamp = true;
    presets.push_back({"tiny-capacity",
                       "test size: sigmoid (deepseek normalisation), 4 groups keep 2 of top-6, capacity 1.0 by "
                       "probs with padding, global_aux, z-loss, shared expert clamped",
                       // vocab 128 = the main job's 8 × 16 tokens: every token distinct, no exact ties for
                       // capacity by probs to break (random_token_batch says why)
                       c, 16, 2, 128});
  }
  {
    // Post-softmax top-2, capacity by position with padding, switch aux, z-loss, gated shared expert, latent MoE.
    MoeConfig c;
    c.hidden = 32;
    c.num_experts = 8;
    c.topk = 2;
    c.ffn_hidden = 16;
    c.topk_scaling_factor = 1.5;
    c.capacity_factor = 1.25;
    c.drop_policy = DropPolicy::position;
    c.pad_to_capacity = true;
    c.aux_loss_type = AuxLossType::aux;
    c.aux_loss_coeff = 1e-2;
    c.z_loss_coeff = 1e-3;
    c.shared_expert_ffn_hidden = 16;
    c.shared_expert_gate = true;
    c.latent_size = 16;
    presets.push_back({"tiny-softmax",
                       "test size: post-softmax top-2 of 8, capacity 1.25 by position with padding, aux, z-loss, "
                       "gated shared expert, latent 16",
                       c, 16, 2, 64});
  }
  {
    // Pre-softmax top-1 with the probabilities on the expert input, seq_aux, z-loss.
    MoeConfig c;
    c.hidden = 32;
    c.num_experts = 8;
    c.topk = 1;
    c.ffn_hidden = 16;
    c.pre_softmax = true;
    c.apply_probs_on_input = true;
    c.aux_loss_type = AuxLossType::seq_aux;
    c.aux_loss_coeff = 1e-2;
    c.z_loss_coeff = 1e-3;
    presets.push_back({"tiny-top1", "test size: pre-softmax top-1 of 8, probabilities on the expert input, seq_aux, "
                                    "z-loss",
                       c, 16, 2, 64});
  }
  presets.push_back({"v4-flash", "DeepSeek-V4-Flash: h 4096, 256 experts, top-6, ffn 2048, route scale 1.5",
                     v4_like(4096, 256, 6, 2048, 1.5), 4096, 1, 129280});
  presets.push_back({"v4-pro", "DeepSeek-V4-Pro: h 7168, 384 experts, top-6, ffn 3072, route scale 2.5",
                     v4_like(7168, 384, 6, 3072, 2.5), 4096, 1, 129280});
  presets.push_back({"v3", "DeepSeek-V3: h 7168, 256 experts in 8 groups keep 4, top-8, ffn 2048",
                     v3_like(7168, 256, 8, 2048, 8, 4), 4096, 1, 129280});
  // Depth in MoE blocks: the test-size models run 4, the first a hash layer. The full-size ones (DeepSeek's
  // configs): V3 61 blocks, the first 3 dense, so 58 MoE; V4 all MoE, the first 3 hash-routed (moe_n_hash_layers: 3).
  const struct {
    std::string_view name;
    int layers;
    int dense_layers;
    int hash_layers;
  } depths[] = {{"v4-flash", 43, 0, 3}, {"v4-pro", 61, 0, 3}, {"v3", 58, 3, 0}};
  for (auto& p : presets) {
    if (p.name.starts_with("tiny-")) {
      p.num_layers = 4;
      p.n_hash_layers = 1;
    }
    for (const auto& d : depths) {
      if (p.name != d.name) continue;
      p.num_layers = d.layers;
      p.num_dense_layers = d.dense_layers;
      p.n_hash_layers = d.hash_layers;
    }
  }
  return presets;
}

}  // namespace

const std::vector<LayerPreset>& layer_presets() {
  static const std::vector<LayerPreset> presets = make_presets();
  return presets;
}

const LayerPreset& layer_preset(std::string_view name) {
  std::string known;
  for (const auto& p : layer_presets()) {
    if (p.name == name) return p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  throw std::invalid_argument("unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

}  // namespace moe
