// The model every command takes, from one option set: a preset or a file (ours, a golden case, a Hugging Face
// config.json: model_files/model_file.hpp), then Megatron's flag names overriding single fields, validated once. The
// layout flags under Megatron's names too (ETP defaulting to TP, as Megatron's does). And the guards a real size
// needs: a memory estimate before anything large is allocated, and --shrink's rules for checking a model's structure
// at test size.
#pragma once

#include "reference/moe_layer.hpp"

#include "reference/parallel_layout.hpp"
#include "reference/presets.hpp"
#include "model_files/model_file.hpp"

#include <CLI/CLI.hpp>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace moe::cli {

// Megatron-Core's names for the fields of one MoE layer (unset: keep the model's).
struct MegatronFlags {
  std::optional<int> num_experts, topk, hidden, ffn_hidden, num_groups, group_topk, shared_ffn_hidden, num_layers;
  std::optional<int> num_attention_heads, num_query_groups, kv_channels, mtp_num_layers;
  std::optional<double> rotary_base, mtp_loss_scaling_factor, swiglu_clamp;
  std::optional<ScoreFunction> score_function;
  std::optional<AuxLossType> load_balancing_type;  // by Megatron's names (aux_loss, seq_aux_loss, …)
  std::optional<DropPolicy> drop_policy;
  std::optional<double> topk_scaling_factor, bias_update_rate, aux_loss_coeff, z_loss_coeff, capacity_factor;
  bool pre_softmax = false, expert_bias = false, pad_to_capacity = false;
};

struct ModelOptions {
  std::string preset;      // empty: the command's default preset
  std::string model_file;  // --model FILE
  MegatronFlags flags;
  std::string default_preset = "tiny-v4";

  // The model: preset or file, then the flags; validated. Throws std::invalid_argument naming the rule.
  // `semantics` reaches the mapping of a Hugging Face file (read_model_file).
  LayerPreset resolve(const Semantics& semantics = {}) const;
  // What the model came from, for headers: "tiny-v4", "models/qwen3-30b-a3b.json (Hugging Face qwen3_moe)".
  std::string source() const;
  // Notes from reading the file (model_files::mapping_notes): assumptions made, keys with no effect on the MoE layer.
  std::vector<std::string> notes(const Semantics& semantics = {}) const;

 private:
  // The file read and mapped once per semantics: a command asks for its model a dozen times (RunOptions::model()),
  // and each asking re-read and re-parsed it. Shared by copies of the options.
  const model_files::ModelFile& file(const Semantics& semantics) const;
  std::shared_ptr<std::map<std::string, model_files::ModelFile>> files_ =
      std::make_shared<std::map<std::string, model_files::ModelFile>>();
};

// --preset, --model, and the Megatron-named model flags (--num-experts, --moe-router-topk, …), bound to `o`.
void add_model_options(CLI::App& cmd, ModelOptions& o);
// Their names, for "was any model flag given?"
const std::vector<std::string>& model_option_names();
// The names of the options `declare` gives a command, read off the declarations themselves (so that a list of them
// cannot fall behind a new option): each option's first long name, the help flag left out.
std::vector<std::string> declared_option_names(const std::function<void(CLI::App&)>& declare);

// The layout flags, each under our short name and Megatron's (--tp / --tensor-model-parallel-size, …), bound to
// `layout`; `world_required` for the accounting commands. After parsing, call finish_layout: ETP defaults to TP.
void add_layout_flags(CLI::App& cmd, ParallelLayout& layout, bool world_required);
// Their names but --world's, for "was any layout size given?"
const std::vector<std::string>& layout_size_flag_names();
void finish_layout(const CLI::App& cmd, ParallelLayout& layout);

// Memory a run would need, estimated before it allocates: every byte counted is a double the run holds.
struct MemoryEstimate {
  double parameters = 0;   // bytes: the model's parameters and their copies (gradients, shards, optimizer)
  double activations = 0;  // bytes: what a microbatch's forward keeps for its backward
  double ranks = 0;        // bytes: in-process ranks themselves (dist::inproc_world_bytes: stacks, group building)
  double total() const { return parameters + activations + ranks; }
};
// The machine's available memory in bytes (/proc/meminfo MemAvailable; 0 when unknown).
double available_memory();
// Throws std::invalid_argument with the estimate, what is available and `remedy` when the estimate exceeds 80% of
// the available memory.
void require_fits(const MemoryEstimate& estimate, const std::string& what, const std::string& remedy);

// One layer's parameters, gradients and a copy, and what its forward keeps for `tokens` tokens.
MemoryEstimate layer_memory(const MoeConfig& config, double tokens);
// Floating-point operations of one layer's forward and backward over `tokens` tokens (routed, shared, router).
double layer_flops(const MoeConfig& config, double tokens);
// Long work is announced before it starts: past about ten seconds of the oracle's double arithmetic, a line on stderr
// with the estimate, so that a run that looks stuck is known to be working.
void note_long_work(double flops, ExpertPath path = ExpertPath::per_token);

// --oracle-path expert-batched|per-token: how the oracle computes the experts (reference/moe_layer.hpp). `layer`,
// `compare` and `bench --oracle` take the fast expert-batched path unless the definition is asked for.
void add_oracle_path_option(CLI::App& cmd, ExpertPath& path);

}  // namespace moe::cli
