// The one memory estimate (reference/memory_estimate.hpp): exact for parameters (checked against the tensors a
// seeded model really holds), saturating instead of wrapping, and the budget refusal with its figures.
#include "reference/memory_estimate.hpp"

#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <limits>

namespace moe {
namespace {

ModelConfig model_with_everything() {
  ModelConfig m;
  m.layer.hidden = 6;
  m.layer.num_experts = 4;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 3;
  m.layer.score_function = ScoreFunction::sigmoid;
  m.layer.expert_bias = true;
  m.layer.bias_update_rate = 1e-3;
  m.layer.shared_expert_ffn_hidden = 5;
  m.layer.shared_expert_gate = true;
  m.num_layers = 3;
  m.n_hash_layers = 1;
  m.mtp_depth = 1;
  m.vocab = 11;
  m.attention = {2, 1, 4, 10000.0};
  return m;
}

// Every tensor random_model_params allocates, counted from the tensors themselves.
std::uint64_t allocated_bytes(const ModelConfig& c, ModelParams<double> p) {
  std::uint64_t bytes = 0;
  for (const auto& v : trained_tensors(c, p)) bytes += static_cast<std::uint64_t>(v.size) * 8;
  for (const auto& layer : p.layers) {
    bytes += static_cast<std::uint64_t>(layer.expert_bias.size()) * 8;
    bytes += static_cast<std::uint64_t>(layer.tid2eid.size()) * 8;
  }
  return bytes;
}

TEST(MemoryEstimate, ModelParametersAreCountedExactly) {
  const ModelConfig m = model_with_everything();
  EXPECT_EQ(model_param_bytes(m), allocated_bytes(m, random_model_params<double>(m, 1)));
  ModelConfig latent = m;
  latent.layer.latent_size = 2;
  latent.attention = {};
  latent.mtp_depth = 0;
  EXPECT_EQ(model_param_bytes(latent), allocated_bytes(latent, random_model_params<double>(latent, 1)));
}

TEST(MemoryEstimate, SaturatesInsteadOfWrapping) {
  ModelConfig m = model_with_everything();
  m.num_layers = std::numeric_limits<int>::max();
  m.vocab = std::numeric_limits<int>::max();
  m.layer.hidden = std::numeric_limits<int>::max();
  m.layer.ffn_hidden = std::numeric_limits<int>::max();
  EXPECT_EQ(model_param_bytes(m), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(global_step_bytes(m, std::numeric_limits<int>::max(), std::numeric_limits<int>::max()),
            std::numeric_limits<std::uint64_t>::max());
}

// Issue 42: random_model_params(num_layers = 2^31 − 1) took all memory before std::bad_alloc; the estimate
// (≈ 2^31 blocks of a few KB) is refused against the budget before anything is allocated.
TEST(MemoryEstimate, RefusesAboveTheBudgetWithBothFigures) {
  ModelConfig m = model_with_everything();
  m.num_layers = std::numeric_limits<int>::max();
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "1000000", 1);
  test::expect_error("more than the memory budget of 1000000 bytes",
                     [&] { require_memory(model_param_bytes(m), "model"); });
  EXPECT_NO_THROW(require_memory(1000000, "model"));
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "12GB", 1);
  test::expect_error("MOE_ORACLE_MEMORY_BUDGET: '12GB' is not a whole number of bytes", [] { memory_budget(); });
  ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
  EXPECT_GT(memory_budget(), 1ULL << 20);  // physical memory
  test::expect_error("physical memory", [&] { require_memory(model_param_bytes(m), "model"); });
}

// Issue 55: `checkpoint verify` allocated whatever checkpoint.json declared. The load's estimate holds at least the
// parameters with their coverage counts (three sets with moments), saturates for a declared 2^62 elements, and a
// saturated estimate is refused as "more than 2^64 bytes" rather than as a number.
TEST(MemoryEstimate, ACheckpointLoadCountsItsSetsAndSaturates) {
  const ModelConfig m = model_with_everything();
  const std::uint64_t params = model_param_bytes(m);
  EXPECT_GE(checkpoint_load_bytes(m, false), params * 5 / 2);
  EXPECT_GE(checkpoint_load_bytes(m, true), 3 * params * 5 / 2);
  EXPECT_GT(checkpoint_load_bytes(m, true), checkpoint_load_bytes(m, false));
  ModelConfig huge = m;  // 2^20 · 2^20 · 2^14 · 3 · 256 layers: 3 · 2^62 expert elements
  huge.layer.hidden = huge.layer.ffn_hidden = 1 << 20;
  huge.layer.num_experts = 1 << 14;
  huge.num_layers = 256;
  EXPECT_EQ(checkpoint_load_bytes(huge, true), std::numeric_limits<std::uint64_t>::max());
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "1000000", 1);
  test::expect_error("loading: needs more than 2^64 bytes, more than the memory budget of 1000000 bytes",
                     [&] { require_memory(checkpoint_load_bytes(huge, true), "loading"); });
  ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
}

}  // namespace
}  // namespace moe
