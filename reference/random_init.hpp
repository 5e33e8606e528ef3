// Seeded parameters and inputs for a config: what `moe-oracle` runs on when no tensors are given.
//
// Values are drawn from a fixed-algorithm generator (std::mt19937_64 with our own uniform mapping), so a seed gives
// the same numbers on every platform and standard library.
#pragma once

#include "reference/config.hpp"
#include "reference/moe_layer.hpp"

#include <cstdint>

namespace moe {

// Every parameter the config uses, scaled like a trained layer (≈ 1/sqrt(fan_in)); unused ones stay empty.
// `vocab` sizes tid2eid (hash routing), filled with distinct random experts per id.
template <typename T>
MoeParams<T> random_params(const MoeConfig& config, int vocab, std::uint64_t seed);

// x [seq·batch, h], input_ids [batch, seq] in [0, vocab) (hash routing), no padding, one partition.
template <typename T>
MoeInputs<T> random_inputs(const MoeConfig& config, int seq, int batch, int vocab, std::uint64_t seed);

// grad_y [T, h] for the layer loss L = Σ⟨grad_y, y⟩ + aux + z.
template <typename T>
Matrix<T> random_grad_y(const MoeConfig& config, int tokens, std::uint64_t seed);

}  // namespace moe
