// What the commands that run the model (check, explain) share: the model (a preset at test size, its depth), the
// global batch (sequence length, size, micro-batch, padding), the loss mode and the semantics profile — the options,
// their parsing and the objects they describe — and the strict parser of a one-line layout ("cp=2,ep=4").
#pragma once

#include "reference/global_step.hpp"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace moe::cli {

struct RunOptions {
  std::string preset = "tiny-v4";
  int layers = 4, hash_layers = 1;
  int seq = 16, micro_batch = 1, global_batch = 8;
  std::string padding;  // padded positions at the end of each sequence, "3,0,1" (cycled over the batch)
  std::string scaling = "sum";
  std::string semantics = "intended";
  std::uint64_t seed = 1;

  ModelConfig model() const;  // the preset's layer, the depth, the semantics; validated
  // Padded positions per sequence of a batch of `size` sequences: the pattern cycled (empty: none).
  std::vector<int> padded(int size) const;
  GlobalBatch batch(const ModelConfig& model, std::uint64_t seed) const;
  LossMode mode() const { return parse_loss_mode(scaling); }
  std::string describe() const;  // one line: model, batch, padding, scaling, semantics
};

// The model, batch, scaling and semantics options, bound to `o`.
void add_run_options(CLI::App& cmd, RunOptions& o);

// "world=4,cp=2,ep=2" (commas or spaces; unnamed sizes 1; world defaults to tp·cp·pp·dp with dp=… allowed).
// Every value a whole number ≥ 1, every key known and given once; the layout validated. `option` names the flag in
// the error messages.
ParallelLayout parse_layout(const std::string& text, const std::string& option);

// "w4 tp1 cp2 pp1 ep2 etp1 dp2 edp2"
std::string layout_name(const ParallelLayout& layout);

}  // namespace moe::cli
