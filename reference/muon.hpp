// Muon (MomentUm Orthogonalized by Newton–Schulz) as Megatron-Core drives it through emerging_optimizers'
// OrthogonalizedOptimizer (megatron/core/optimizer/emerging_optimizers.py, optimizer_config.py muon_*), for every
// trained matrix except the embedding and the head; the rest (norm vectors, embedding, head) take AdamW
// (Megatron's muon_scalar_optimizer = 'adam'). For a matrix θ with gradient g and momentum buffer m:
//
//   θ ← θ·(1 − lr·wd)                                  decoupled weight decay
//   m ← m + (1 − β)·(g − m)                            an EMA (torch's lerp_), β = momentum
//   u = nesterov ? g + β·(m − g) : m
//   θ ← θ − lr · s · NS(u),   s = extra_scale · √max(rows, cols)      ("spectral" scale mode)
//
// NS is the quintic Newton–Schulz iteration: with X = u (transposed when it has more rows than columns, so that
// X·Xᵀ is the small Gram matrix) divided by max(‖u‖_F, 1e-7),
//   for i = 0 … 4:  A = X·Xᵀ;  B = b_i·A + c_i·A·A;  X = a_i·X + B·X
// with the five (a_i, b_i, c_i) of emerging_optimizers' "quintic" set. Each step maps every singular value σ of X to
// a_i·σ + b_i·σ³ + c_i·σ⁵ and keeps the singular vectors, so NS(u) ≈ U·Vᵀ of u = U·Σ·Vᵀ (singular values land near
// 1, not exactly on it).
//
// The whole logical matrix is orthogonalised: a matrix sharded over TP or ETP must be gathered first — the parallel
// system does so with its gradient all-to-all (distributed/train/muon_exchange.hpp). An expert's fc1 is one matrix,
// [gate; up] stacked, as Megatron's grouped linear weight is; it is not split into its two halves.
#pragma once

#include <array>
#include <string>

#include "reference/model.hpp"
#include "reference/optimizer.hpp"

namespace moe {

struct MuonConfig {
  double lr = 1e-3;
  double momentum = 0.95;  // Megatron's muon_momentum
  bool nesterov = false;   // muon_nesterov
  double weight_decay = 0.0;
  double extra_scale = 1.0;  // muon_extra_scale_factor
};

// The "quintic" coefficients (a, b, c) of the five Newton–Schulz steps.
inline constexpr std::array<std::array<double, 3>, 5> kQuinticNewtonSchulz{{{4.0848, -6.8946, 2.9270},
                                                                            {3.9505, -6.3029, 2.6377},
                                                                            {3.7418, -5.5913, 2.3037},
                                                                            {2.8769, -3.1427, 1.2046},
                                                                            {2.8366, -3.0525, 1.2012}}};

// NS(u) as above: the same shape as u.
Matrix<double> newton_schulz(const Matrix<double>& u);

// √max(rows, cols): the "spectral" scale of a logical [rows, cols] matrix.
double muon_spectral_scale(Eigen::Index rows, Eigen::Index cols);

// Whether Muon takes the trained tensor `name` of shape `shape` (trained_tensors' names): every matrix but the
// embedding and the head.
bool is_muon_matrix(const std::string& name, const std::vector<Eigen::Index>& shape);

// The scaled, orthogonalised direction lr multiplies, from the momentum m and gradient g of one matrix (m already
// updated): s·NS(u). Shared with the parallel system, which computes it where the whole matrix is.
Matrix<double> muon_direction(const MuonConfig& muon, const Matrix<double>& m, const Matrix<double>& g);

// One step over every trained tensor. `state.m` holds Muon's momentum buffer for Muon matrices and AdamW's first
// moment for the rest; `state.v` is AdamW's second moment (zero, and left so, for Muon matrices); `state.step`
// counts steps for AdamW's bias correction.
void muon_step(const ModelConfig& config, const MuonConfig& muon, const AdamConfig& adam, AdamState& state,
               ModelParams<double>& params, ModelParams<double>& grads);

}  // namespace moe
