// Seeded parameters and inputs for a config: what `moe-oracle` runs on when no tensors are given.
//
// Values are drawn from a fixed-algorithm generator (std::mt19937_64 with our own uniform mapping), so a seed gives
// the same numbers on every platform and standard library.
#pragma once

#include "reference/config.hpp"
#include "reference/moe_layer.hpp"

#include <cstdint>
#include <random>

namespace moe {

// mt19937_64 is fully specified by the standard; the mapping to [−1, 1) is ours (53 random bits), so a seed
// gives the same tensors everywhere (std::uniform_real_distribution is implementation-defined).
class SeededUniform {
 public:
  explicit SeededUniform(std::uint64_t seed) : engine_(seed) {}
  double next() { return static_cast<double>(engine_() >> 11) * 0x1.0p-52 - 1.0; }
  std::uint64_t bits() { return engine_(); }

  template <typename T>
  Matrix<T> matrix(Eigen::Index rows, Eigen::Index cols, double scale) {
    Matrix<T> m(rows, cols);
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = static_cast<T>(scale * next());
    return m;
  }

 private:
  std::mt19937_64 engine_;
};

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
