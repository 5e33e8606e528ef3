// The router's losses on one rank: the aux losses with their statistics reduced over the right group, and the
// z-loss, each as this rank's share (the shares of a group add up to the group's loss) and its gradient with
// respect to the local logits.
//
//   aux, seq_aux: counts and token counts summed over tp_cp (one microbatch of one replica)
//   global_aux:   summed over tp_dp_cp (one step of every replica), accumulated over the steps so far
//   z:            coeff/N · Σ_local lse², N the microbatch's valid tokens (tp_cp)
// The aux map is the plain top-k of s' (softmax, or s/(Σ s + 1e-20)); padded tokens are left out throughout.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "reference/config.hpp"
#include "reference/tensor.hpp"

#include <cstdint>
#include <vector>

namespace moe::dist {

struct StatisticGroups {
  Communicator* tp_cp = nullptr;
  Communicator* tp_dp_cp = nullptr;
};

// global_aux counts over the steps of the current global batch (identical on every rank).
struct GlobalAuxCounts {
  std::vector<double> sum;  // [E]
  int steps = 0;
};

struct LocalTokens {
  std::vector<bool> padding_mask;  // [n], true = padded
  std::vector<int> sequence;       // [n] the microbatch sequence (0 … batch−1) of each local row (seq_aux)
  int batch = 1;                   // sequences in the microbatch
};

template <typename T>
struct RouterLossShare {
  T value = 0;            // this rank's share
  Matrix<T> grad_logits;  // d share / d local logits
};

// Advances `global` by one step when the type is global_aux. Every rank of the groups must call it.
template <typename T>
RouterLossShare<T> aux_loss_share(const MoeConfig& config, const Matrix<T>& logits, const Matrix<T>& scores,
                                  const LocalTokens& tokens, const StatisticGroups& groups, GlobalAuxCounts& global);

template <typename T>
RouterLossShare<T> z_loss_share(const MoeConfig& config, const Matrix<T>& logits, const LocalTokens& tokens,
                                Communicator& tp_cp);

}  // namespace moe::dist
