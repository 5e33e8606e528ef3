// What the commands that run the model (check, explain) share: the model (a preset at test size, its depth), the
// global batch (sequence length, size, micro-batch, padding), the loss mode and the semantics profile — the options,
// their parsing and the objects they describe — and the strict parser of a one-line layout ("cp=2,ep=4").
#pragma once

#include "cli/model_options.hpp"
#include "reference/global_step.hpp"
#include "reference/named.hpp"
#include "reference/semantics.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace moe::cli {

// --quant: what the dispatch quantises (the model's fp8_dispatch).
enum class Quant { none, fp8_dispatch };
inline constexpr Named<Quant> kQuantNames[] = {{Quant::none, "none"}, {Quant::fp8_dispatch, "fp8-dispatch"}};
constexpr std::span<const Named<Quant>> names_of(Quant) { return kQuantNames; }

struct RunOptions {
  ModelOptions source;                // --preset / --model / Megatron's model flags
  std::optional<int> hash_layers;     // default: the model's
  bool shrink = false;                // --shrink: the model's structure at test size (shrink_model)
  int ep_multiple = 1;                // with shrink: the EP sizes the run uses (the shrunk E divides by them)
  int seq = 16, micro_batch = 1, global_batch = 8;
  std::string padding;  // padded positions at the end of each sequence, "3,0,1" (cycled over the batch)
  LossMode scaling = LossMode::sum;
  Semantics semantics;         // default: intended
  Quant quant = Quant::none;
  bool bf16_storage = false;   // check --dtype bf16: activations stored in bf16 (the model's bf16_storage)
  std::uint64_t seed = 1;

  ModelConfig model() const;  // the model's layer, its depth (4 MoE layers when unknown), the semantics; validated
  // Padded positions per sequence of a batch of `size` sequences: the pattern cycled (empty: none).
  std::vector<int> padded(int size) const;
  GlobalBatch batch(const ModelConfig& model, std::uint64_t seed) const;
  LossMode mode() const { return scaling; }
  std::string describe() const;  // one line: model, batch, padding, scaling, semantics
};

// The model, batch, scaling and semantics options, bound to `o`.
void add_run_options(CLI::App& cmd, RunOptions& o);
// Their names (declared_option_names), for "which run options were given?"
const std::vector<std::string>& run_option_names();
// --semantics, as every command that takes it spells and parses it.
CLI::Option* add_semantics_option(CLI::App& cmd, Semantics& semantics);

// --shrink: a model's structure at a size a CPU checks in seconds. Kept: top-k, score function, normalisation, α,
// groups (num_groups, group_topk), expert bias and its update, the aux type and coefficients, z-loss, capacity
// (factor, policy, padding), the clamp, the shared expert and its gate, latent MoE, probs on the input, the
// semantics, the kind of attention (MHA, GQA, MQA). Scaled: hidden → 32, routed and shared widths → 16, latent →
// 16, attention → at most 4 heads of width 8, MoE layers → at most 4 (hash layers at most 1), vocab → 64, and E →
// the smallest multiple of lcm(num_groups, ep_multiple) that is ≥ 2k and gives each group at least k/group_topk
// experts (never more than E).
LayerPreset shrink_model(const LayerPreset& model, int ep_multiple);

// "world=4,cp=2,ep=2" (commas or spaces; unnamed sizes 1; world defaults to tp·cp·pp·dp with dp=… allowed).
// Every value a whole number ≥ 1, every key known and given once; the layout validated. `option` names the flag in
// the error messages.
ParallelLayout parse_layout(const std::string& text, const std::string& option);

// "w4 tp1 cp2 pp1 ep2 etp1 dp2 edp2"
std::string layout_name(const ParallelLayout& layout);

}  // namespace moe::cli
