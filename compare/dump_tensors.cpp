#include "compare/dump_tensors.hpp"

#include "compare/dump_names.hpp"

#include <cctype>
#include <map>

namespace moe::compare {
namespace {

[[noreturn]] void fail(const std::filesystem::path& where, const std::string& problem) {
  throw DumpError(where.string() + ": " + problem);
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_integer(formats::NpyDtype t) { return t == formats::NpyDtype::i8 || t == formats::NpyDtype::i4; }

// A rank's file against its spec: the shape, and for exact tensors the kind of values stored.
void check_file(const TensorFile& file, const TensorSpec& spec) {
  if (file.header.shape != spec.shape)
    fail(file.path, "shape " + shape_text(file.header.shape) + ", expected " + shape_text(spec.shape));
  const formats::NpyDtype t = file.header.dtype;
  if (spec.name == tensor::kPaddingMask && t != formats::NpyDtype::b1)
    fail(file.path, "must hold booleans (|b1, true = padded), not " + std::string(formats::npy_descr(t)));
  if (spec.name == tensor::kRoutingMap && t != formats::NpyDtype::b1 && !is_integer(t))
    fail(file.path, "must hold booleans (|b1) or integers, not " + std::string(formats::npy_descr(t)));
  if ((spec.name == "input_ids" || spec.name == tensor::kTid2Eid) && !is_integer(t))
    fail(file.path, "must hold integers (<i8 or <i4), not " + std::string(formats::npy_descr(t)));
  if (spec.name == tensor::kLocalTokensPerExpert && !is_integer(t))
    fail(file.path, "must hold integers (<i8 or <i4), not " + std::string(formats::npy_descr(t)));
  if (!spec.exact && (t == formats::NpyDtype::b1 || is_integer(t)))
    fail(file.path, "must hold floating values, not " + std::string(formats::npy_descr(t)));
}

std::string ranks_text(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// The two forms of an expert tensor's name (weight or gradient): experts.local_experts.<i>.linear_fc<n>.weight…
// and experts.linear_fc<n>.weight<i>….
bool sequential_form(const std::string& name) { return name.starts_with("experts.local_experts."); }
bool grouped_form(const std::string& name) {
  for (const char* prefix : {"experts.linear_fc1.weight", "experts.linear_fc2.weight"})
    if (name.starts_with(prefix) && name.size() > std::string(prefix).size() &&
        std::isdigit(static_cast<unsigned char>(name[std::string(prefix).size()])))
      return true;
  return false;
}

}  // namespace

ExpertNaming expert_naming(const RankDump& rank) {
  for (const auto& [name, file] : rank.files)
    if (grouped_form(name)) return ExpertNaming::grouped;
  return ExpertNaming::sequential;
}

std::string expert_weight_name(ExpertNaming naming, std::int64_t local, const std::string& which) {
  return naming == ExpertNaming::grouped ? "experts." + which + ".weight" + std::to_string(local)
                                         : "experts.local_experts." + std::to_string(local) + "." + which + ".weight";
}

namespace {
GluShardShapes glu_shard_shapes(std::int64_t d, std::int64_t h, std::int64_t parts) {
  return {{2 * d / parts, h}, {h, d / parts}};
}
}  // namespace

GluShardShapes expert_shard_shapes(const MoeConfig& c, const ParallelLayout& l) {
  return glu_shard_shapes(c.ffn_hidden, c.hidden, l.etp);
}

GluShardShapes shared_shard_shapes(const MoeConfig& c, const ParallelLayout& l) {
  return glu_shard_shapes(c.shared_expert_ffn_hidden, c.hidden, l.tp);
}

std::vector<TensorSpec> rank_tensors(const Dump& dump, int rank) {
  const MoeConfig& c = dump.config;
  const ParallelLayout& l = dump.layout;
  const std::int64_t S = dump.seq, B = dump.batch, h = c.hidden, E = c.num_experts, tp = l.tp;
  const std::int64_t nle = E / l.ep, local_rows = S / tp * B;
  const RankDump& rd = dump.ranks[static_cast<size_t>(rank)];
  using enum TensorRole;
  std::vector<TensorSpec> t;
  t.push_back({tensor::kHiddenStates, {S / tp, B, h}, input, true, false});
  t.push_back({tensor::kOutputGrad, {S / tp, B, h}, input, false, false});
  t.push_back({tensor::kPaddingMask, {S / tp, B}, input, false, true});
  t.push_back({tensor::kRouterWeight, {E, h}, parameter, true, false});
  if (c.hash_routing) {  // DeepSeek-V4's hash layers: the experts are tid2eid[input id], the router only weighs them
    t.push_back({"input_ids", {S / tp, B}, input, true, true});
    const auto table = rd.files.find(tensor::kTid2Eid);
    const std::int64_t V = table == rd.files.end() || table->second.header.shape.empty() ? 1
                                                                                          : table->second.header.shape[0];
    t.push_back({tensor::kTid2Eid, {V, c.topk}, parameter, true, true});
  }
  if (c.expert_bias) t.push_back({tensor::kExpertBias, {E}, parameter, true, false});
  const ExpertNaming naming = expert_naming(rd);
  const GluShardShapes expert = expert_shard_shapes(c, l);
  for (std::int64_t i = 0; i < nle; ++i) {
    for (const char* which : {"linear_fc1", "linear_fc2"}) {
      const std::string name = expert_weight_name(naming, i, which);
      const std::vector<std::int64_t>& shape = std::string(which) == "linear_fc1" ? expert.fc1 : expert.fc2;
      t.push_back({name, shape, parameter, true, false});
      t.push_back({name + ".grad", shape, backward, false, false});
    }
  }
  if (c.has_shared_expert()) {
    const GluShardShapes shared = shared_shard_shapes(c, l);
    t.push_back({tensor::kSharedFc1, shared.fc1, parameter, true, false});
    t.push_back({tensor::kSharedFc2, shared.fc2, parameter, true, false});
    t.push_back({tensor::kSharedFc1Grad, shared.fc1, backward, false, false});
    t.push_back({tensor::kSharedFc2Grad, shared.fc2, backward, false, false});
    if (c.shared_expert_gate) {
      t.push_back({tensor::kSharedGate, {1, h}, parameter, true, false});
      t.push_back({tensor::kSharedGateGrad, {1, h}, backward, false, false});
    }
  }
  t.push_back({tensor::kOutput, {S / tp, B, h}, forward, true, false});
  t.push_back({tensor::kProbs, {local_rows, E}, forward, false, false});
  t.push_back({tensor::kRoutingMap, {local_rows, E}, forward, dump.replay_capacity, true});
  if (c.expert_bias) t.push_back({tensor::kLocalTokensPerExpert, {E}, forward, false, true});
  if (c.aux_loss_type != AuxLossType::none) t.push_back({"aux_loss", {}, forward, false, false});
  if (c.z_loss_coeff > 0) t.push_back({"z_loss", {}, forward, false, false});
  t.push_back({tensor::kHiddenStatesGrad, {S / tp, B, h}, backward, false, false});
  t.push_back({tensor::kRouterWeightGrad, {E, h}, backward, false, false});
  return t;
}

bool has_backward(const Dump& dump) { return dump.ranks.front().has(tensor::kOutputGrad); }

void check_dump_tensors(const Dump& dump) {
  // One naming of the experts: not both forms on a rank, not one form here and the other there.
  for (const RankDump& rd : dump.ranks) {
    const ExpertNaming naming = expert_naming(rd);
    for (const auto& [name, file] : rd.files)
      if (naming == ExpertNaming::grouped ? sequential_form(name) : grouped_form(name))
        fail(file.path, "names an expert SequentialMLP's way and another file of rank " + std::to_string(rd.rank) +
                            " TEGroupedMLP's: a dump names its experts one way");
    if (naming != expert_naming(dump.ranks.front()))
      fail(rd.dir, std::string("names its experts ") + (naming == ExpertNaming::grouped ? "TEGroupedMLP's" : "SequentialMLP's") +
                       " way and rank 0 the other: a dump names its experts one way on every rank");
  }
  // Presence over the ranks, name by name (the specs list the same names on every rank but the experts').
  std::map<std::string, std::vector<int>> with, without;
  std::map<std::string, TensorSpec> spec_of;
  for (const RankDump& rd : dump.ranks) {
    for (const TensorSpec& s : rank_tensors(dump, rd.rank)) {
      // Expert names are per rank: presence is judged by the local index's name, which every rank shares.
      spec_of.emplace(s.name, s);
      (rd.has(s.name) ? with : without)[s.name].push_back(rd.rank);
      if (rd.has(s.name)) check_file(rd.files.at(s.name), s);
      else if (s.required)
        fail(rd.dir, "no " + s.name + ".npy: a dump holds " + (s.role == TensorRole::forward ? "the layer's output"
                                                                                               : "every input and parameter of its config") +
                         " on every rank");
    }
  }
  for (const auto& [name, ranks] : with) {
    if (!without.count(name)) continue;
    fail(dump.dir, name + " is on rank " + ranks_text(ranks) + " but not on rank " + ranks_text(without.at(name)) +
                       ": a tensor is on every rank or on none");
  }
  const bool backward = has_backward(dump);
  for (const RankDump& rd : dump.ranks) {
    for (const auto& [name, file] : rd.files) {
      const bool gradient = name.ends_with(".grad") && name != tensor::kOutputGrad;
      if (gradient && !backward)
        fail(file.path, "a gradient without output.grad: the dump must hold the dL/dy its gradients come from");
      // A parameter of a layer the config does not describe means the config is not the layer's.
      const bool parameter = !name.ends_with(".grad") && (name.starts_with("router.") || name.starts_with("experts.") ||
                                                          name.starts_with("shared_experts.")) &&
                             (name.find("weight") != std::string::npos || name == tensor::kExpertBias ||
                                                          name == tensor::kTid2Eid);
      if (parameter && !spec_of.count(name))
        fail(file.path, "a parameter this config does not have (check the config's expert_bias, shared expert, "
                        "num_experts and the layout's ep)");
    }
  }
  if (backward && !dump.ranks.front().has(tensor::kHiddenStatesGrad))
    fail(dump.dir, "output.grad without hidden_states.grad: a dump with a backward holds dL/dx on every rank");
}

}  // namespace moe::compare
