#include "cli/model_options.hpp"

#include "cli/choice_option.hpp"
#include "cli/cli_checks.hpp"
#include "model_files/layer_config_answer.hpp"
#include "model_files/model_file.hpp"
#include "reference/expert_path_names.hpp"
#include "reference/memory_estimate.hpp"
#include "reference/named.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

namespace moe::cli {
namespace {

// Megatron's --moe-router-load-balancing-type names for the aux-loss types.
constexpr Named<AuxLossType> kMegatronBalancing[] = {{AuxLossType::aux, "aux_loss"},
                                                     {AuxLossType::seq_aux, "seq_aux_loss"},
                                                     {AuxLossType::global_aux, "global_aux_loss"},
                                                     {AuxLossType::none, "none"}};

// The Megatron-named overrides on one layer config; aux_loss_coeff follows the balancing type when only one is set.
void apply(const MegatronFlags& f, LayerPreset& m) {
  MoeConfig& c = m.config;
  if (f.num_experts) c.num_experts = *f.num_experts;
  if (f.topk) c.topk = *f.topk;
  if (f.hidden) c.hidden = *f.hidden;
  if (f.ffn_hidden) {
    c.ffn_hidden = *f.ffn_hidden;
    // DeepSeek's shared expert is n routed experts wide: a new routed width carries it along (its own flag wins).
    if (m.shared_experts > 0) {
      const std::int64_t width = std::int64_t{m.shared_experts} * c.ffn_hidden;
      if (width > std::numeric_limits<int>::max())
        throw std::invalid_argument("--moe-ffn-hidden-size " + std::to_string(c.ffn_hidden) + " × " +
                                    std::to_string(m.shared_experts) +
                                    " shared experts: the shared expert's width must be at most 2^31 - 1");
      c.shared_expert_ffn_hidden = static_cast<int>(width);
    }
  }
  if (f.score_function) c.score_function = *f.score_function;
  if (f.pre_softmax) c.pre_softmax = true;
  if (f.topk_scaling_factor) c.topk_scaling_factor = *f.topk_scaling_factor;
  if (f.expert_bias) c.expert_bias = true;
  if (f.bias_update_rate) c.bias_update_rate = *f.bias_update_rate;
  if (f.num_groups) c.num_groups = *f.num_groups;
  if (f.group_topk) c.group_topk = *f.group_topk;
  if (f.load_balancing_type) {
    c.aux_loss_type = *f.load_balancing_type;
    if (c.aux_loss_type == AuxLossType::none) c.aux_loss_coeff = 0;
    else if (c.aux_loss_coeff == 0 && !f.aux_loss_coeff) c.aux_loss_coeff = 1e-2;  // Megatron's default coefficient
  }
  if (f.aux_loss_coeff) c.aux_loss_coeff = *f.aux_loss_coeff;
  if (f.z_loss_coeff) c.z_loss_coeff = *f.z_loss_coeff;
  if (f.capacity_factor) c.capacity_factor = *f.capacity_factor;
  if (f.swiglu_clamp) c.swiglu_clamp = *f.swiglu_clamp;
  if (f.drop_policy) c.drop_policy = *f.drop_policy;
  if (f.pad_to_capacity) c.pad_to_capacity = true;
  if (f.shared_ffn_hidden) c.shared_expert_ffn_hidden = *f.shared_ffn_hidden;
  if (f.num_layers) m.num_layers = *f.num_layers;
  // Attention, as Megatron defaults it: query groups = heads (no GQA), kv channels = hidden / heads.
  AttentionConfig& a = m.attention;
  if (f.num_attention_heads) {
    const bool had = a.heads > 0;
    a.heads = *f.num_attention_heads;
    if (!had) {
      a.groups = a.heads;
      a.head_dim = a.heads > 0 ? c.hidden / a.heads : 0;
    }
  }
  if ((f.num_query_groups || f.kv_channels || f.rotary_base) && a.heads == 0)
    throw std::invalid_argument("--num-query-groups, --kv-channels and --rotary-base need attention: give "
                                "--num-attention-heads");
  if (f.num_query_groups) a.groups = *f.num_query_groups;
  if (f.kv_channels) a.head_dim = *f.kv_channels;
  if (f.rotary_base) a.rope_base = *f.rotary_base;
  if (a.heads == 0) a = AttentionConfig{};
  if (f.mtp_num_layers) m.mtp_depth = *f.mtp_num_layers;
  if (f.mtp_loss_scaling_factor) m.mtp_loss_scale = *f.mtp_loss_scaling_factor;
}

}  // namespace

LayerPreset ModelOptions::resolve(const Semantics& semantics) const {
  if (!preset.empty() && !model_file.empty()) throw std::invalid_argument("--preset and --model: give one");
  LayerPreset m = model_file.empty() ? layer_preset(preset.empty() ? default_preset : preset)
                                     : file(semantics).model;
  apply(flags, m);
  try {
    m.config.validate();
    if (m.attention.heads > 0) m.attention.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(source() + ": " + e.what());
  }
  return m;
}

std::string ModelOptions::source() const {
  if (model_file.empty()) return preset.empty() ? default_preset : preset;
  return model_files::model_source(model_file, file({}));
}

const model_files::ModelFile& ModelOptions::file(const Semantics& semantics) const {
  const std::string key = model_file + "\n" + semantics.spec();
  auto it = files_->find(key);
  if (it == files_->end()) it = files_->emplace(key, model_files::read_model_file(model_file, semantics)).first;
  return it->second;
}

std::vector<std::string> ModelOptions::notes(const Semantics& semantics) const {
  if (model_file.empty()) return {};
  return model_files::mapping_notes(file(semantics));
}

std::vector<std::string> declared_option_names(const std::function<void(CLI::App&)>& declare) {
  CLI::App app;  // a throwaway command
  declare(app);
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options())
    if (option != app.get_help_ptr()) names.push_back(option->get_name());
  return names;
}

const std::vector<std::string>& model_option_names() {
  static const std::vector<std::string> names = declared_option_names([](CLI::App& app) {
    static ModelOptions unused;  // outlives the throwaway command, whose options are bound to it
    add_model_options(app, unused);
  });
  return names;
}

const std::vector<std::string>& layout_size_flag_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = declared_option_names([](CLI::App& app) {
      static ParallelLayout unused;
      add_layout_flags(app, unused, false);
    });
    std::erase(n, std::string("--world"));
    return n;
  }();
  return names;
}

void add_model_options(CLI::App& cmd, ModelOptions& o) {
  cmd.add_option("--preset", o.preset, "a named model (tiny-v4, tiny-attention, tiny-mtp, tiny-v3, tiny-capacity, tiny-softmax, tiny-top1, "
                                       "v4-flash, v4-pro, v3; default " + o.default_preset + ")");
  cmd.add_option("--model", o.model_file,
                 "a model file: ours (moe-model/1), a golden case.json, or a Hugging Face config.json (DeepSeek-V3, "
                 "Qwen3-MoE, Qwen2-MoE, Mixtral); models/ has examples")
      ->check(CLI::ExistingFile);
  MegatronFlags& f = o.flags;
  cmd.add_option("--num-experts", f.num_experts, "routed experts E (Megatron's --num-experts)")->check(whole_at_least(1));
  cmd.add_option("--moe-router-topk", f.topk, "experts per token k")->check(whole_at_least(1));
  cmd.add_option("--hidden-size", f.hidden, "hidden width h")->check(whole_at_least(1));
  cmd.add_option("--moe-ffn-hidden-size", f.ffn_hidden, "routed expert width d")->check(whole_at_least(1));
  add_choice(cmd, "--moe-router-score-function", f.score_function, "the router's score function");
  cmd.add_flag("--moe-router-pre-softmax", f.pre_softmax, "top-k of the softmax, not renormalised");
  cmd.add_option("--moe-router-topk-scaling-factor", f.topk_scaling_factor, "α, the routed weights' scale");
  cmd.add_flag("--moe-router-enable-expert-bias", f.expert_bias, "expert bias β (selection only)");
  cmd.add_option("--moe-router-bias-update-rate", f.bias_update_rate, "rate of the expert-bias update");
  cmd.add_option("--moe-router-num-groups", f.num_groups, "expert groups (group-limited routing)");
  cmd.add_option("--moe-router-group-topk", f.group_topk, "groups kept per token");
  add_choice(cmd, "--moe-router-load-balancing-type", f.load_balancing_type,
             "the load-balancing loss, by Megatron's names", {}, std::span<const Named<AuxLossType>>(kMegatronBalancing));
  cmd.add_option("--moe-aux-loss-coeff", f.aux_loss_coeff, "coefficient of the load-balancing loss");
  cmd.add_option("--moe-z-loss-coeff", f.z_loss_coeff, "coefficient of the z-loss");
  cmd.add_option("--moe-expert-capacity-factor", f.capacity_factor, "capacity factor (unset: dropless)");
  cmd.add_option("--activation-func-clamp-value", f.swiglu_clamp,
                 "the SwiGLU clamp L: gate ≤ L, |up| ≤ L (DeepSeek-V4's swiglu_limit; 0 clamps at 0, as Megatron "
                 "and transformers do; default: the model's)")
      ->check(real_above_zero(true));
  add_choice(cmd, "--moe-token-drop-policy", f.drop_policy, "which tokens an expert over capacity drops");
  cmd.add_flag("--moe-pad-expert-input-to-capacity", f.pad_to_capacity, "pad every expert to its capacity");
  cmd.add_option("--moe-shared-expert-intermediate-size", f.shared_ffn_hidden, "shared expert width (0: none)");
  cmd.add_option("--layers,--num-layers", f.num_layers, "MoE layers of the model (default: the model's)")
      ->check(whole_at_least(1));
  cmd.add_option("--num-attention-heads", f.num_attention_heads,
                 "attention heads of every block (0: blocks without attention; default: the model's)")
      ->check(whole_at_least(0));
  cmd.add_option("--num-query-groups", f.num_query_groups, "key/value heads (GQA; default: the heads)")
      ->check(whole_at_least(1));
  cmd.add_option("--kv-channels", f.kv_channels, "width of a head (default: hidden / heads)")
      ->check(whole_at_least(1));
  cmd.add_option("--rotary-base", f.rotary_base, "RoPE base (default 10000)")->check(real_above_zero(false));
  cmd.add_option("--mtp-num-layers", f.mtp_num_layers,
                 "multi-token-prediction depths after the main model (0: none; default: the model's)")
      ->check(whole_at_least(0));
  cmd.add_option("--mtp-loss-scaling-factor", f.mtp_loss_scaling_factor,
                 "λ: each depth's CE enters the objective with λ/depths (default: the model's, 0.1)")
      ->check(real_above_zero(true));
}

void add_layout_flags(CLI::App& cmd, ParallelLayout& layout, bool world_required) {
  auto* world = cmd.add_option("--world", layout.world, "number of ranks (GPUs)")->check(whole_at_least(1));
  if (world_required) world->required();
  cmd.add_option("--tp,--tensor-model-parallel-size", layout.tp, "tensor (and sequence) parallel size")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd.add_option("--cp,--context-parallel-size", layout.cp, "context parallel size")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd.add_option("--pp,--pipeline-model-parallel-size", layout.pp, "pipeline parallel size")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd.add_option("--ep,--expert-model-parallel-size", layout.ep, "expert parallel size")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd.add_option("--etp,--expert-tensor-parallel-size", layout.etp,
                 "expert tensor parallel size (default: the tensor parallel size, as in Megatron)")
      ->check(whole_at_least(1));
  cmd.add_option("--gtp,--gtp-weight-remat-size", layout.gtp,
                 "GTP weight-rematerialisation size: ranks of distinct data that each keep 1/gtp of the dense "
                 "weights (Megatron: --tensor-parallel-num-weight-shards = tp·gtp); volume refuses it")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd.add_option("--egtp,--expert-gtp-weight-remat-size", layout.egtp,
                 "the same for the routed experts (Megatron: --expert-tensor-parallel-num-weight-shards = etp·egtp); "
                 "volume refuses it")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd.add_option("--order", layout.order, "rank order, fastest-varying axis first")->capture_default_str();
}

void finish_layout(const CLI::App& cmd, ParallelLayout& layout) {
  if (cmd.count("--etp") == 0) layout.etp = layout.tp;  // Megatron: expert_tensor_parallel_size defaults to TP
}

double available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  std::string unit;
  constexpr std::string_view kAvailable = "MemAvailable:";  // the kernel's estimate of what can be allocated
  while (in >> key >> kib >> unit)
    if (key == kAvailable) return kib * 1024;
  return 0;
}

void require_fits(const MemoryEstimate& e, const std::string& what, const std::string& remedy) {
  // The library's budget (reference/memory_estimate.hpp: MOE_ORACLE_MEMORY_BUDGET, else physical memory), and no
  // more than 80% of what is available now.
  const double available = available_memory();
  const double budget = std::min(static_cast<double>(memory_budget()), available > 0 ? 0.8 * available : 1e300);
  if (e.total() <= budget) return;
  const auto gib = [](double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g GiB", bytes / (1024.0 * 1024 * 1024));
    return std::string(buf);
  };
  // The budget is named by where it comes from, so that a refusal under a small MOE_ORACLE_MEMORY_BUDGET says so.
  const bool from_env = std::getenv("MOE_ORACLE_MEMORY_BUDGET") != nullptr;
  throw std::invalid_argument(what + " needs about " + gib(e.total()) + " (parameters and their copies " +
                              gib(e.parameters) + ", activations " + gib(e.activations) +
                              (e.ranks > 0 ? ", the in-process ranks themselves " + gib(e.ranks) : std::string()) +
                              "), more than the " + gib(budget) + " it may take (the memory budget: " +
                              (from_env ? "MOE_ORACLE_MEMORY_BUDGET " + std::to_string(memory_budget()) + " bytes"
                                        : std::string("physical memory")) +
                              ", at most 80% of the " + gib(available) + " available); " + remedy);
}

MemoryEstimate layer_memory(const MoeConfig& c, double tokens) {
  // The library's estimate: the parameters, their gradients and a copy; a forward's and backward's intermediates.
  MemoryEstimate memory;
  memory.parameters = 3.0 * static_cast<double>(layer_param_bytes(c, 1));
  memory.activations = static_cast<double>(layer_activation_bytes(c, tokens < 0 ? 0 : static_cast<std::uint64_t>(tokens)));
  return memory;
}

double layer_flops(const MoeConfig& c, double tokens) {
  // A matrix product of m×k by k×n is 2mkn; the backward is about twice the forward.
  const double per_token = 2.0 * (c.topk * 3.0 * c.expert_width() * c.ffn_hidden + 3.0 * c.hidden *
                                  c.shared_expert_ffn_hidden + c.num_experts * 1.0 * c.hidden);
  return 3.0 * per_token * tokens;
}

void note_long_work(double flops, ExpertPath path) {
  // The double oracle's rate: about a GFLOP/s per-token (matrix-vector products), ~20 GFLOP/s per thread
  // expert-batched (Eigen's GEMMs at roughly half a core's double peak; docs/performance.md).
  const double rate = path == ExpertPath::per_token ? 1e9 : 2e10 * std::max(1u, std::thread::hardware_concurrency());
  const double seconds = flops / rate;
  if (seconds < 10) return;
  char buf[200];
  std::snprintf(buf, sizeof buf, "moe-oracle: note: about %.3g GFLOP; at the %s oracle's ~%.3g GFLOP/s this takes "
                "about %.0f %s\n", flops / 1e9, std::string(to_string(path)).c_str(), rate / 1e9,
                seconds < 600 ? seconds : seconds / 60, seconds < 600 ? "s" : "min");
  std::cerr << buf << std::flush;
}

void add_oracle_path_option(CLI::App& cmd, ExpertPath& path) {
  add_choice(cmd, "--oracle-path", path,
             "how the oracle computes the experts: expert-batched (one GEMM per expert, the default) or per-token (the "
             "definition, one matrix-vector product per token and expert; hours at real sizes)");
}

}  // namespace moe::cli
