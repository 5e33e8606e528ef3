// The global step oracle: what one training step of the whole parallel system should compute.
//
// The global batch [B, S] is split as Megatron's data path splits it:
//   microbatch i of DP replica r holds sequences i·(b·dp) + r·b + [0, b)      (MegatronPretrainingSampler)
//   CP rank c holds positions of chunks c and 2cp−1−c of 2cp equal chunks      (load-balanced causal CP)
//   SP (TP) rank j holds the j-th of tp equal slices of those local positions   (sequence parallel)
// A source rank (c, j) routes its local rows (local position-major, then b); capacity is computed per source
// rank, so it is the only place where CP and TP change the oracle's numbers. Here and below dp counts the
// replicas, GTP peers included (dp·gtp of the layout, ParallelLayout::dp_with_gtp): they take distinct samples.
//
// The global objective J (what every parallel layout must differentiate), with N_{r,i} the valid tokens of
// microbatch (r, i), N their sum, m = B/(b·dp) microbatches per replica:
//   sum / avg (Megatron's default, per-microbatch mean):
//     J = 1/(dp·m) · Σ_{r,i} [ CE_{r,i}/N_{r,i} + Σ_l aux_l(r,i) + Σ_l z_l(r,i) ]
//   per_token:
//     J = 1/N · Σ_{r,i} [ CE_{r,i} + N_{r,i}·(Σ_l aux_l(r,i) + Σ_l z_l(r,i)) ]
// With D MTP depths (model.hpp), depth k's CE normalised like the main CE over its own (rolled) valid tokens Nᵏ
// and weighted λ/D: sum / avg add 1/(dp·m)·Σ_{r,i} λ/D·CEᵏ_{r,i}/Nᵏ_{r,i}; per_token adds λ/D·Σ_{r,i} CEᵏ_{r,i}/Nᵏ
// (Nᵏ over the global batch). Its blocks' aux and z losses are Σ_l terms like any other block's.
// aux and seq_aux take their statistics over one microbatch of one replica (its tp×cp shards: Megatron's
// tp_cp group). global_aux takes them over step i of all replicas (tp×dp×cp), accumulated over the steps so far:
// its term for step i is the group's loss, Σ_r aux_l(r,i) with the group's counts and T, entering J as
// 1/m·Σ_i (mean modes) or 1/N·Σ_i N_i·term_i (per_token). Megatron instead averages the replicas' shares
// over dp, a gradient 1/dp too small (NVIDIA/Megatron-LM issue #3672): that is a bug to detect, not the objective.
//
// When does the default (per-microbatch mean) objective depend on the layout? Only through the weights
// 1/N_{r,i}: if every microbatch has the same number of valid tokens (no padding, or padding spread evenly), J
// equals the per-token objective and does not depend on dp or b. With uneven padding, regrouping sequences into
// microbatches (changing dp or b) changes J; CP, TP, EP and ETP never change it (they split tokens of a
// microbatch, not the microbatches). The aux losses depend on dp and b in every mode (their statistics are per
// microbatch), and capacity dropping also on cp and tp (per source rank).
//
// That is the intended objective. A Megatron profile (config.semantics(), semantics.hpp) changes J where that
// Megatron version does, and then CP and TP do change it (c the CP rank, p a source rank of P = tp·cp, N_c and
// N_p their valid tokens):
//   ce-per-cp-rank              (sum/avg)   CE term 1/(dp·cp·m) · Σ_{r,i,c} CE_c/N_c
//   z-loss-local-mean           (sum/avg)   z_l(r,i) = Σ_p coeff/P · mean_p lse²
//   per-token-aux-local-tokens  (per-token) aux share of p weighted N_p·P instead of N_{r,i}
//   per-token-aux-group-tokens  (per-token, the router masked) every share weighted N_{r,i}·P (global_aux: N_i·P)
//   global-aux-dp-average       global_aux weighted as aux: 1/(dp·m), or per-token as aux is
//   router-counts-padding       the router sees no padding: padded tokens count in aux, z and bias statistics, and
//                               per-token weights of aux and z count every token (CE still counts valid ones)
//   seq-aux-mean-length, bias-counts-padded-slots, shared-expert-clamped, fused-swiglu-ignores-clamp: inside the
//   layer (moe_layer.hpp); they depend on the micro-batch, capacity and options, not on tp or cp.
#pragma once

#include "reference/model.hpp"
#include "reference/parallel_layout.hpp"
#include "reference/scaling_rules.hpp"

#include <cstdint>
#include <vector>

namespace moe {

struct GlobalBatch {
  int seq = 0;
  int size = 0;           // B sequences
  IndexMatrix input_ids;  // [B, S]
  IndexMatrix labels;     // [B, S]
  BoolMatrix loss_mask;   // [B, S], false = padding
};

// Ids and labels uniform in [0, V); the last `padded[b]` positions of sequence b are padding (empty = none).
// Refuses (std::invalid_argument) a padded list that is neither empty nor one entry per sequence, or an entry
// outside [0, seq]. random_global_batch calls it; so does every caller that builds a padding list from user input.
void check_padding(int seq, int size, const std::vector<int>& padded);
GlobalBatch random_global_batch(const ModelConfig& config, int seq, int size, std::uint64_t seed,
                                const std::vector<int>& padded = {});

// The sequences of microbatch i of replica r (Megatron's sampler order).
std::vector<int> microbatch_sequences(int dp, int micro_batch, int replica, int index);
// The positions CP rank c holds, in local order (two load-balanced chunks; S must divide by 2·cp).
std::vector<int> context_parallel_positions(int seq, int cp, int cp_rank);
// One part per source rank (cp-major, then tp): its rows s·b + bi of the microbatch, in local order.
std::vector<std::vector<int>> source_rank_partition(int seq, int micro_batch, int cp, int tp);

// The microbatch (r, i) as the model sees it (rows t = s·b + bi), with its capacity partition.
TokenBatch microbatch(const GlobalBatch& batch, const ParallelLayout& layout, int micro_batch, int replica, int index);

struct GlobalStep {
  double objective = 0;
  double ce_term = 0;
  double aux_term = 0;
  double z_term = 0;
  double mtp_term = 0;                                    // Σ_k of the MTP depths' CE terms (λ/D included)
  std::int64_t valid_tokens = 0;                          // N
  int num_microbatches = 0;                               // m per replica
  ModelParams<double> grads;                              // dJ/dθ
  std::vector<std::vector<std::int64_t>> bias_counts;     // per layer [E]: real assignments over the global batch
  std::vector<Vector<double>> expert_bias_updated;        // per layer; empty where the layer has no bias update
  std::vector<GlobalAuxState> global_aux;                 // per layer, after the batch (global_aux layers)
  Matrix<double> ce_weights;                              // [B, S] the weight of each token's CE in J (0: padding)
};

// Runs the forward and backward of every microbatch of every replica and combines them as J above. Under bf16
// storage the step computes with bf16_weights(params) (model.hpp) and its gradients are for those weights. Under
// gtp-factor-missing the routed experts' gradients are those a Megatron run synchronises (scaling_rules.hpp).
GlobalStep global_step(const ModelConfig& config, const ModelParams<double>& params, const GlobalBatch& batch,
                       const ParallelLayout& layout, int micro_batch, LossMode mode);

}  // namespace moe
