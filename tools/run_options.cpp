#include "tools/run_options.hpp"

#include "reference/presets.hpp"

#include <map>
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
  const LayerPreset& p = layer_preset(preset);
  ModelConfig m;
  m.layer = p.config;
  m.layer.semantics = Semantics::parse(semantics);
  m.num_layers = layers;
  m.n_hash_layers = hash_layers;
  m.vocab = p.vocab;
  m.validate();
  return m;
}

std::vector<int> RunOptions::padded(int size) const {
  std::vector<int> pattern;
  for (const std::string& item : split_items(padding)) {
    if (item.find_first_not_of("0123456789") != std::string::npos || item.size() > 9)
      throw std::invalid_argument("--padding: '" + item + "' is not a whole number of positions");
    const int n = std::stoi(item);
    if (n > seq) throw std::invalid_argument("--padding: " + item + " padded positions in a sequence of " +
                                             std::to_string(seq));
    pattern.push_back(n);
  }
  if (pattern.empty()) return {};
  std::vector<int> out(static_cast<size_t>(size));
  for (int b = 0; b < size; ++b) out[static_cast<size_t>(b)] = pattern[static_cast<size_t>(b) % pattern.size()];
  return out;
}

GlobalBatch RunOptions::batch(const ModelConfig& m, std::uint64_t batch_seed) const {
  return random_global_batch(m, seq, global_batch, batch_seed, padded(global_batch));
}

std::string RunOptions::describe() const {
  std::ostringstream s;
  s << preset << " model (" << layers << " layers, " << hash_layers << " hash), global batch " << global_batch
    << " × seq " << seq << ", micro-batch " << micro_batch << ", padding "
    << (padding.empty() ? std::string("none") : "[" + padding + "]") << ", scaling " << scaling << ", semantics "
    << Semantics::parse(semantics).spec();
  return s.str();
}

void add_run_options(CLI::App& cmd, RunOptions& o) {
  cmd.add_option("--preset", o.preset, "layer preset of every MoE layer (tiny-v4, tiny-v3)")->capture_default_str();
  cmd.add_option("--layers", o.layers, "MoE layers in the model")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--hash-layers", o.hash_layers, "of which the first n route by tid2eid")->capture_default_str();
  cmd.add_option("--seq", o.seq, "sequence length")->capture_default_str()->check(CLI::PositiveNumber);
  cmd.add_option("--micro-batch", o.micro_batch, "sequences per microbatch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--global-batch", o.global_batch, "sequences per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd.add_option("--padding", o.padding,
                 "padded positions at the end of each sequence, e.g. 3,0,1 (cycled over the batch; default none)");
  cmd.add_option("--scaling", o.scaling, "sum, avg or per-token")
      ->capture_default_str()
      ->check(CLI::IsMember({"sum", "avg", "per-token"}));
  cmd.add_option("--semantics", o.semantics,
                 "intended, megatron-core-0.19 or megatron-main, optionally with ,+deviation / ,-deviation "
                 "(moe-oracle semantics lists them)")
      ->capture_default_str();
  cmd.add_option("--seed", o.seed, "seed of parameters and batch")->capture_default_str();
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
  return s.str();
}

}  // namespace moe::cli
