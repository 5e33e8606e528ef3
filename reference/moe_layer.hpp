// The MoE-layer oracle: the exact math of one DeepSeek-V4 / Megatron-style MoE layer, forward and backward.
//
// Notation (docs/layer.md): T tokens x_t ∈ R^h (row t = s·batch + b), E routed experts, top-k,
// routed expert F_e (SwiGLU, width d), shared expert F_s, weights g_{t,e}, selected set I_t.
//
//   u_t   = latent_down · x_t                      (latent MoE; else u_t = x_t)
//   z_t   = Σ_{e ∈ I_t} F_e(u_t; g_{t,e})          (g after the activation, or on the input for k = 1)
//   y_t   = latent_up · z_t + F_s(x_t) · σ(w_g·x_t) (shared expert and its gate optional)
//
// Loss convention of the layer: L = Σ⟨grad_y, y⟩ + aux_scale·aux_loss + z_scale·z_loss (scales default to 1; the
// model-level oracle passes the weights of the global objective, per row where a semantics rule needs it). Everything is validated at this boundary.
#pragma once

#include <string_view>

#include "reference/config.hpp"
#include "reference/tensor.hpp"

#include <cstdint>
#include <optional>
#include <vector>

namespace moe {

template <typename T>
struct MoeParams {
  Matrix<T> router_weight;             // W_g [E, h]
  Vector<T> expert_bias;               // β [E]            (expert_bias)
  IndexMatrix tid2eid;                 // [V, k]           (hash_routing)
  std::vector<Matrix<T>> expert_fc1;   // E × [2d, w]: rows [gate; up], w = expert_width()
  std::vector<Matrix<T>> expert_fc2;   // E × [w, d]
  Matrix<T> shared_fc1;                // [2ds, h]         (shared expert)
  Matrix<T> shared_fc2;                // [h, ds]
  Matrix<T> shared_gate;               // w_g [1, h]       (shared_expert_gate)
  Matrix<T> latent_down;               // [latent, h]      (latent_size > 0)
  Matrix<T> latent_up;                 // [h, latent]
};

// Counts accumulated over the microbatches of one global batch for global_aux (Megatron's
// global_tokens_per_expert and ga_steps). Statistics only: no gradient flows through them.
struct GlobalAuxState {
  std::vector<double> tokens_per_expert_sum;  // [E], or empty before the first microbatch
  int steps = 0;
};

// global_aux over a group larger than one call (Megatron all-reduces the counts over tp×dp×cp): this
// microbatch's aux-map counts and valid-token count summed over the whole group. They replace the call's own
// counts in the accumulated state and its T; P stays the call's own, so the group's loss is the sum of its calls'.
struct GlobalAuxGroup {
  std::vector<double> counts;  // [E]
  double tokens = 0;
};

template <typename T>
struct MoeInputs {
  int seq = 0;
  int batch = 0;
  Matrix<T> x;                            // [seq·batch, h], row = s·batch + b
  IndexMatrix input_ids;                  // [batch, seq]   (hash_routing)
  std::vector<bool> padding_mask;         // [T], true = padded token; empty = no padding
  // The capacity partition: each part is one source rank's local rows (in local order). Empty = one part of all
  // rows in order. Capacity is computed per part; the parts must cover every row exactly once.
  std::vector<std::vector<int>> partition;
  // Capacity decisions replayed from a framework's run: its routing map after dropping and padding [T, E]
  // (capacity.hpp: replay_capacity). Unset = the oracle's own rule.
  std::optional<BoolMatrix> capacity_decision;
  // Routing replay: each row's selected experts taken from another run [T, k] (in selection order) instead of the
  // top-k of this run's ranking scores; the weights are still computed from this call's logits. compare replays a
  // framework's selection where it differs from the oracle's only within the router's rounding (a near tie), and
  // its rounding oracle replays the double oracle's. Not on hash layers (their table decides). Unset = top-k.
  std::optional<IndexMatrix> selection;
  GlobalAuxState global_aux;              // global_aux only: the state before this microbatch
  std::optional<GlobalAuxGroup> global_aux_group;  // global_aux only; unset = this call is the whole group
};

template <typename T>
struct Routing {
  Matrix<T> logits;                 // [T, E] = x·W_gᵀ
  Matrix<T> scores;                 // [T, E] s = softmax / sigmoid / sqrtsoftplus of the logits
  IndexMatrix selected;             // [T, k] I_t in selection order, before dropping
  Matrix<T> topk_weights;           // [T, k] g_{t,I_t[j]} before dropping (normalised, × α)
  Matrix<T> probs;                  // [T, E] after dropping; 0 off the selection
  BoolMatrix routing_map;           // [T, E] after dropping, padded capacity slots included (GEMM rows)
  BoolMatrix padded_slot;           // [T, E] slots added by pad_to_capacity (probability 0)
  std::vector<std::int64_t> tokens_per_expert;  // [E] = routing_map column sums
  std::vector<std::int64_t> bias_counts;        // [E] real assignments after dropping, padded tokens excluded
};

template <typename T>
struct MoeForward {
  Routing<T> routing;
  Matrix<T> y;                      // [T, h]
  T aux_loss = 0;                   // includes its coefficient; 0 when aux_loss_type is none
  Vector<T> aux_rows;               // [T] each row's part of aux_loss (empty when aux_loss_type is none)
  T z_loss = 0;                     // includes its coefficient
  std::vector<std::int64_t> aux_counts;  // [E] this call's aux-map counts over valid tokens (aux type set)
  GlobalAuxState global_aux;        // after this microbatch (global_aux only)
  Vector<T> expert_bias_updated;    // β after one update from bias_counts (bias_update_rate set)
};

// Gradients of L with the shapes of the parameters they belong to (expert_bias and tid2eid stay empty: the bias
// is not trained by gradient, the table is not a parameter).
template <typename T>
struct MoeGradients {
  Matrix<T> x;
  MoeParams<T> params;
};

struct LossScales {
  double aux = 1.0;
  double z = 1.0;
  // Per-row scales of the aux loss replacing `aux` (empty: uniform), for a rule that weights the rows of one
  // source rank differently (per-token-aux-local-tokens). Row t's aux term depends on row t's logits only.
  std::vector<double> aux_rows{};
};

// Whether the routed experts' weights are in MoeParams (held) or supplied one expert at a time by the caller
// (streamed: expert_fc1 and expert_fc2 empty; finish_forward / finish_backward below).
enum class RoutedWeights { held, streamed };

// Throws std::invalid_argument naming the rule when a shape or option does not fit the config.
template <typename T>
void validate_layer_inputs(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                           RoutedWeights routed = RoutedWeights::held);

// How the experts are computed; both are the same formulas.
//   per_token       the definition: each token through each of its experts, matrix-vector products, in the order
//                   the formulas are written (for stepping through and teaching);
//   expert_batched  expert by expert over all the rows routed to it, GEMMs (expert_batched.hpp): the fast path for
//                   real layer sizes, held to per_token within the double tolerance.
enum class ExpertPath { per_token, expert_batched };
ExpertPath parse_expert_path(std::string_view name);  // "per-token", "expert-batched"
std::string_view to_string(ExpertPath path);

template <typename T>
MoeForward<T> moe_forward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                          ExpertPath path = ExpertPath::per_token);

// Backward of L = Σ⟨grad_y, y⟩ + scales.aux·aux_loss + scales.z·z_loss through the forward of the same inputs.
template <typename T>
MoeGradients<T> moe_backward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                             const MoeForward<T>& forward, const Matrix<T>& grad_y, LossScales scales = {},
                             ExpertPath path = ExpertPath::per_token);

// The layer around its routed experts, for a caller that computes the experts itself: compare streams each
// expert's weights from a dump once, over the rows of every replica (compare/dump_oracle.cpp), with
// routed_expert_forward / routed_expert_backward (expert_batched.hpp). moe_forward and moe_backward are these
// phases with the experts computed in between, so the phases are what every layer test exercises.
//
//   forward:  r = route(c, p, in); u = routed_inputs(c, p, x); z [T, w] = Σ_e experts(u, r)
//             f = finish_forward(c, p, in, r, z)                 y, shared expert, losses, bias update
//   backward: grad_z = routed_output_grad(c, p, grad_y); the experts give dL/du, dL/dprobs (and z for latent MoE)
//             finish_backward(c, p, in, f, grad_y, scales, {grad_u, grad_probs, z})
// The gradients finish_backward returns hold no expert weights' (the caller has them); `params` holds no routed
// experts (RoutedWeights::streamed).
template <typename T>
struct RoutedBackward {
  Matrix<T> grad_u;      // [T, w]
  Matrix<T> grad_probs;  // [T, E]
  Matrix<T> z;           // [T, w], the forward's z: latent MoE only (latent_up's gradient), else empty
};

template <typename T>
Matrix<T> routed_inputs(const MoeConfig& config, const MoeParams<T>& params, const Matrix<T>& x);
template <typename T>
Matrix<T> routed_output_grad(const MoeConfig& config, const MoeParams<T>& params, const Matrix<T>& grad_y);
template <typename T>
MoeForward<T> finish_forward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                             Routing<T> routing, const Matrix<T>& z, ExpertPath path = ExpertPath::per_token);
template <typename T>
MoeGradients<T> finish_backward(const MoeConfig& config, const MoeParams<T>& params, const MoeInputs<T>& inputs,
                                const MoeForward<T>& forward, const Matrix<T>& grad_y, const LossScales& scales,
                                const RoutedBackward<T>& routed, ExpertPath path = ExpertPath::per_token);

}  // namespace moe
