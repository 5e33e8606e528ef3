#include "reference/random_init.hpp"

#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace moe {
namespace {

double fan_in_scale(int fan_in) { return 1.0 / std::sqrt(static_cast<double>(fan_in)); }

// Hash routing draws ids modulo vocab and sizes tid2eid [vocab, k]: vocab 0 would divide by zero.
void require_hash_vocab(const MoeConfig& config, int vocab) {
  if (config.hash_routing && vocab < 1)
    throw std::invalid_argument("random init: hash routing needs vocab >= 1, got " + std::to_string(vocab));
}

}  // namespace

template <typename T>
MoeParams<T> random_params(const MoeConfig& config, int vocab, std::uint64_t seed) {
  config.validate();
  require_hash_vocab(config, vocab);
  SeededUniform rng(seed);
  const int h = config.hidden, E = config.num_experts, d = config.ffn_hidden, w = config.expert_width();
  MoeParams<T> p;
  p.router_weight = rng.matrix<T>(E, h, fan_in_scale(h));
  if (config.expert_bias) p.expert_bias = rng.matrix<T>(E, 1, 0.05);
  for (int e = 0; e < E; ++e) {
    p.expert_fc1.push_back(rng.matrix<T>(2 * d, w, fan_in_scale(w)));
    p.expert_fc2.push_back(rng.matrix<T>(w, d, fan_in_scale(d)));
  }
  if (config.has_shared_expert()) {
    p.shared_fc1 = rng.matrix<T>(2 * config.shared_expert_ffn_hidden, h, fan_in_scale(h));
    p.shared_fc2 = rng.matrix<T>(h, config.shared_expert_ffn_hidden, fan_in_scale(config.shared_expert_ffn_hidden));
  }
  if (config.shared_expert_gate) p.shared_gate = rng.matrix<T>(1, h, fan_in_scale(h));
  if (config.latent_size > 0) {
    p.latent_down = rng.matrix<T>(config.latent_size, h, fan_in_scale(h));
    p.latent_up = rng.matrix<T>(h, config.latent_size, fan_in_scale(config.latent_size));
  }
  if (config.hash_routing) {
    // k distinct experts per token id: the first k of a seeded Fisher–Yates shuffle.
    p.tid2eid.resize(vocab, config.topk);
    std::vector<std::int64_t> experts(static_cast<size_t>(E));
    for (int v = 0; v < vocab; ++v) {
      std::iota(experts.begin(), experts.end(), 0);
      for (int j = 0; j < config.topk; ++j) {
        const auto pick = j + static_cast<int>(rng.bits() % static_cast<std::uint64_t>(E - j));
        std::swap(experts[static_cast<size_t>(j)], experts[static_cast<size_t>(pick)]);
        p.tid2eid(v, j) = experts[static_cast<size_t>(j)];
      }
    }
  }
  return p;
}

template <typename T>
MoeInputs<T> random_inputs(const MoeConfig& config, int seq, int batch, int vocab, std::uint64_t seed) {
  require_hash_vocab(config, vocab);
  SeededUniform rng(seed);
  MoeInputs<T> in;
  in.seq = seq;
  in.batch = batch;
  in.x = rng.matrix<T>(static_cast<Eigen::Index>(seq) * batch, config.hidden, 1.0);
  if (config.hash_routing) {
    in.input_ids.resize(batch, seq);
    for (Eigen::Index i = 0; i < in.input_ids.size(); ++i)
      in.input_ids.data()[i] = static_cast<std::int64_t>(rng.bits() % static_cast<std::uint64_t>(vocab));
  }
  return in;
}

template <typename T>
Matrix<T> random_grad_y(const MoeConfig& config, int tokens, std::uint64_t seed) {
  return SeededUniform(seed ^ 0x9e3779b97f4a7c15ULL).matrix<T>(tokens, config.hidden, 1.0);
}

template MoeParams<double> random_params<double>(const MoeConfig&, int, std::uint64_t);
template MoeParams<float> random_params<float>(const MoeConfig&, int, std::uint64_t);
template MoeInputs<double> random_inputs<double>(const MoeConfig&, int, int, int, std::uint64_t);
template MoeInputs<float> random_inputs<float>(const MoeConfig&, int, int, int, std::uint64_t);
template Matrix<double> random_grad_y<double>(const MoeConfig&, int, std::uint64_t);
template Matrix<float> random_grad_y<float>(const MoeConfig&, int, std::uint64_t);

}  // namespace moe
