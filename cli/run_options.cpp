#include "cli/cli_checks.hpp"
#include "cli/run_options.hpp"
#include "cli/choice_option.hpp"

#include "reference/presets.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>

namespace moe::cli {
namespace {

// A whole number ≥ 1, all of `text` (std::stoi would take "2.5" as 2 and "4x" as 4).
int positive_integer(const std::string& text, const std::string& what) {
  if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
    throw std::invalid_argument(what + ": '" + text + "' is not a whole number");
  const int value = std::stoi(text);
  if (value < 1) throw std::invalid_argument(what + ": must be >= 1, got " + text);
  return value;
}

std::vector<std::string> split_items(const std::string& text) {
  std::vector<std::string> items;
  std::string item;
  for (char ch : text + ",") {
    if (ch == ',' || ch == ' ' || ch == '\t') {
      if (!item.empty()) items.push_back(item);
      item.clear();
    } else {
      item += ch;
    }
  }
  return items;
}

}  // namespace

ModelConfig RunOptions::model() const {
  LayerPreset p = source.resolve(semantics);
  if (shrink) p = shrink_model(p, ep_multiple);
  ModelConfig m;
  m.layer = p.config;
  m.layer.semantics = semantics;
  m.layer.fp8_dispatch = quant == Quant::fp8_dispatch;
  m.layer.bf16_storage = bf16_storage;
  m.num_layers = p.num_layers > 0 ? p.num_layers : 4;
  m.n_hash_layers = hash_layers.value_or(p.n_hash_layers);
  m.vocab = p.vocab;
  m.attention = p.attention;
  m.mtp_depth = p.mtp_depth;
  m.mtp_loss_scale = p.mtp_loss_scale;
  m.validate();
  return m;
}

LayerPreset shrink_model(const LayerPreset& model, int ep_multiple) {
  LayerPreset s = model;
  MoeConfig& c = s.config;
  const auto lower = [](int& v, int to) { v = std::min(v, to); };
  lower(c.hidden, 32);
  lower(c.ffn_hidden, 16);
  if (c.shared_expert_ffn_hidden > 0) lower(c.shared_expert_ffn_hidden, 16);
  if (c.latent_size > 0) lower(c.latent_size, 16);
  const int groups = c.num_groups > 0 ? c.num_groups : 1;
  const int per_group = c.num_groups > 0 ? c.topk / c.group_topk : 1;
  const int unit = std::lcm(groups, std::max(ep_multiple, 1));
  int experts = unit;
  while (experts < 2 * c.topk || experts / groups < per_group) experts += unit;
  c.num_experts = std::min(c.num_experts, experts);
  s.num_layers = std::min(s.num_layers > 0 ? s.num_layers : 4, 4);
  s.n_hash_layers = std::min(s.n_hash_layers, 1);
  s.num_dense_layers = 0;
  s.vocab = 64;
  if (s.attention.heads > 0) {
    // The kind of attention kept (MHA, MQA or GQA), at 4 heads of width 8 at most.
    AttentionConfig& a = s.attention;
    const int heads = std::min(a.heads, 4);
    a.groups = a.groups == a.heads ? heads : a.groups == 1 ? 1 : std::gcd(std::min(a.groups, 2), heads);
    a.heads = heads;
    a.head_dim = std::min(a.head_dim, 8);
  }
  s.name += " (shrunk)";
  try {
    c.validate();
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--shrink: the shrunk model is not valid: ") + e.what());
  }
  return s;
}

std::vector<int> RunOptions::padded(int size) const {
  std::vector<int> pattern;
  // Items are split at commas only, so that an empty one (",,,", "3,,1", a trailing comma) is refused as what it
  // is rather than dropped: ",,," used to mean no padding at all.
  if (padding.empty()) return {};
  std::vector<std::string> items;
  std::string between_commas;
  for (char ch : padding + ",") {
    if (ch != ',') {
      between_commas += ch;
      continue;
    }
    const std::vector<std::string> words = split_items(between_commas);  // "3 1" is two items, as before
    if (words.empty()) throw std::invalid_argument("--padding: '" + padding + "' has an empty item");
    items.insert(items.end(), words.begin(), words.end());
    between_commas.clear();
  }
  for (const std::string& item : items) {
    if (item.find_first_not_of("0123456789") != std::string::npos || item.size() > 9)
      throw std::invalid_argument("--padding: '" + item + "' is not a whole number of positions");
    pattern.push_back(std::stoi(item));
  }
  // Cycled over the batch; a list longer than the batch would lose its tail without a word.
  if (pattern.size() > static_cast<std::size_t>(size))
    throw std::invalid_argument("--padding: " + std::to_string(pattern.size()) + " items for a batch of " +
                                std::to_string(size) + " sequences (at most one per sequence; the list is cycled)");
  std::vector<int> out(static_cast<size_t>(size));
  for (int b = 0; b < size; ++b) out[static_cast<size_t>(b)] = pattern[static_cast<size_t>(b) % pattern.size()];
  try {
    check_padding(seq, size, out);  // the library's rule (reference/global_step.hpp), one place for both callers
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--padding: ") + e.what());
  }
  return out;
}

GlobalBatch RunOptions::batch(const ModelConfig& m, std::uint64_t batch_seed) const {
  return random_global_batch(m, seq, global_batch, batch_seed, padded(global_batch));
}

std::string RunOptions::describe() const {
  const ModelConfig m = model();
  std::ostringstream s;
  s << source.source() << (shrink ? " shrunk" : "") << " (" << m.num_layers << " layers, " << m.n_hash_layers
    << " hash; h " << m.layer.hidden << ", E " << m.layer.num_experts << ", k " << m.layer.topk << "), global batch "
    << global_batch << " × seq " << seq << ", micro-batch " << micro_batch << ", padding "
    << (padding.empty() ? std::string("none") : "[" + padding + "]") << ", scaling " << to_string(scaling) << ", semantics "
    << m.semantics().spec() << (m.layer.fp8_dispatch ? ", FP8 dispatch" : "")
    << (m.layer.bf16_storage ? ", bf16 storage" : "");
  return s.str();
}

void add_run_options(CLI::App& cmd, RunOptions& o) {
  add_model_options(cmd, o.source);
  cmd.add_option("--hash-layers", o.hash_layers, "of the MoE layers, the first n route by tid2eid (default: the "
                                                 "model's)");
  cmd.add_flag("--shrink", o.shrink,
               "check the model's structure at test size: same top-k, groups, score function and options; h 32, "
               "widths 16, ≤ 4 layers, fewer experts (docs/commands.md: --shrink)");
  cmd.add_option("--seq,--seq-length", o.seq, "sequence length (default 16, or the smallest that fits the layout)")
      ->check(whole_at_least(1));
  cmd.add_option("--micro-batch,--micro-batch-size", o.micro_batch, "sequences per microbatch")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd.add_option("--global-batch,--global-batch-size", o.global_batch,
                 "sequences per step (default 8, or the smallest that fits the layout)")
      ->check(whole_at_least(1));
  cmd.add_option("--padding", o.padding,
                 "padded positions at the end of each sequence, e.g. 3,0,1 (cycled over the batch; default none)");
  add_choice(cmd, "--quant", o.quant,
             "fp8-dispatch: the rows sent to the routed experts fake-quantised to FP8 e4m3 in 1×128 tiles before the "
             "dispatch (DeepSeek-V3's recipe), in the oracle and the parallel system alike");
  add_choice(cmd, "--scaling", o.scaling, "how the microbatches' losses combine (docs/commands.md)");
  cmd.add_flag_callback("--calculate-per-token-loss", [&o] { o.scaling = LossMode::per_token; },
                        "Megatron's name for --scaling per-token");
  add_semantics_option(cmd, o.semantics);
  cmd.add_option("--seed", o.seed, "seed of parameters and batch")->capture_default_str()->check(seed_value());
}

const std::vector<std::string>& run_option_names() {
  static const std::vector<std::string> names = declared_option_names([](CLI::App& app) {
    static RunOptions unused;  // outlives the throwaway command, whose options are bound to it
    add_run_options(app, unused);
  });
  return names;
}

CLI::Option* add_semantics_option(CLI::App& cmd, Semantics& semantics) {
  std::string profiles;
  for (const SemanticsProfile& p : semantics_profiles())
    profiles += (profiles.empty() ? "" : ", ") + std::string(p.name);
  return cmd
      .add_option_function<std::string>(
          "--semantics", [&semantics](const std::string& spec) { semantics = Semantics::parse(spec); },
          "a profile (" + profiles + "), optionally with ,+deviation / ,-deviation (moe-oracle semantics lists them)")
      ->default_str(semantics.spec());
}

ParallelLayout parse_layout(const std::string& text, const std::string& option) {
  std::map<std::string, int> sizes;
  for (const std::string& item : split_items(text)) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument(option + ": '" + item + "' is not name=size");
    const std::string key = item.substr(0, eq);
    if (sizes.count(key)) throw std::invalid_argument(option + ": '" + key + "' given twice");
    sizes[key] = positive_integer(item.substr(eq + 1), option + " " + key);
  }
  if (sizes.empty()) throw std::invalid_argument(option + ": empty layout (e.g. world=4,ep=2)");
  return layout_from_sizes(sizes, option);
}

std::string layout_name(const ParallelLayout& l) {
  std::ostringstream s;
  s << "w" << l.world << " tp" << l.tp << " cp" << l.cp << " pp" << l.pp << " ep" << l.ep << " etp" << l.etp << " dp"
    << l.dp() << " edp" << l.edp();
  if (l.gtp > 1 || l.egtp > 1) s << " gtp" << l.gtp << " egtp" << l.egtp;
  if (l.vpp > 1) s << " vpp" << l.vpp;
  return s.str();
}

}  // namespace moe::cli
