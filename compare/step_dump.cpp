#include "compare/step_dump.hpp"

#include "compare/parameter_shard.hpp"
#include "compare/step_update.hpp"

#include "formats/strict_json.hpp"
#include "golden/case_files.hpp"
#include "golden/model_case.hpp"
#include "golden/model_case_oracle.hpp"
#include "reference/memory_estimate.hpp"
#include "reference/process_groups.hpp"
#include "storage/json_file.hpp"

#include <algorithm>
#include <cmath>
#include <set>

namespace moe::compare {

namespace fs = std::filesystem;

bool is_step_dump(const fs::path& dir) { return fs::exists(dir / kStepJson); }

namespace {

[[noreturn]] void fail(const fs::path& where, const std::string& what) {
  throw DumpError(where.string() + ": " + what);
}

}  // namespace

bool holds(const std::string& stem, const ProcessGroups& groups, int rank, const ModelConfig& model, int vpp) {
  const int pp = groups.layout().pp, stage = groups.rank_in(GroupKind::pp, rank);
  if (stem == "embedding") {
    if (stage != 0) return false;
  } else if (stem.starts_with("layer")) {
    // Chunks of num_layers / (pp·vpp) consecutive layers, dealt to the stages in turn: chunk q on stage q mod pp.
    const int layer = std::stoi(stem.substr(5));
    if ((layer / (model.num_layers / (pp * vpp))) % pp != stage) return false;
  } else if (stage != pp - 1) {
    return false;
  }
  if (stem.find(".expert_fc") == std::string::npos) return true;
  const int e = std::stoi(stem.substr(stem.rfind('.') + 1));
  const ExpertRange mine = groups.experts_of(rank, model.layer.num_experts);
  return e >= mine.first && e < mine.first + mine.count;
}

namespace {

StepOptimizer read_optimizer(const nlohmann::json& j, const fs::path& meta_path) {
  formats::StrictObject o(j, meta_path.string() + ": optimizer");
  const std::string kind = o.string("kind", o.required("kind"));
  if (kind != "adam") fail(meta_path, "optimizer.kind '" + kind + "': this build judges Adam's step (\"adam\")");
  StepOptimizer s;
  s.adam.lr = o.number("lr", o.required("lr"));
  s.adam.beta1 = o.number("beta1", o.required("beta1"));
  s.adam.beta2 = o.number("beta2", o.required("beta2"));
  s.adam.eps = o.number("eps", o.required("eps"));
  s.adam.weight_decay = o.number("weight_decay", o.required("weight_decay"));
  s.clip_grad = o.number("clip_grad", o.required("clip_grad"));
  s.steps_before = o.integer("steps_before", 0);
  if (s.steps_before < 0) fail(meta_path, "optimizer.steps_before must be >= 0");
  if (const nlohmann::json* state = o.find("state")) {
    if (!state->is_boolean()) fail(meta_path, "optimizer.state must be true or false");
    s.state = state->get<bool>();
  }
  if (const nlohmann::json* classes = o.find("no_decay")) {
    std::string names;
    for (ParameterClass c : kParameterClasses)
      names += std::string(names.empty() ? "" : ", ") + "'" + to_string(c) + "'";
    if (!classes->is_array()) fail(meta_path, "optimizer.no_decay must be a list of parameter classes: " + names);
    for (const auto& name : *classes) {
      const auto named = [&](ParameterClass c) { return name.is_string() && name.get<std::string>() == to_string(c); };
      const auto it = std::find_if(std::begin(kParameterClasses), std::end(kParameterClasses), named);
      if (it == std::end(kParameterClasses))
        fail(meta_path, "optimizer.no_decay: " + name.dump() + " is not a parameter class (" + names + ")");
      s.no_decay.push_back(*it);
    }
  }
  o.reject_unknown();
  const auto in = [](double v, double lo, double hi) { return v >= lo && v < hi; };
  if (!(s.adam.lr > 0) || !in(s.adam.beta1, 0, 1) || !in(s.adam.beta2, 0, 1) || !(s.adam.eps > 0) ||
      s.adam.weight_decay < 0 || s.clip_grad < 0)
    fail(meta_path, "optimizer: lr and eps must be > 0, beta1 and beta2 in [0, 1), weight_decay and clip_grad >= 0");
  return s;
}

}  // namespace

StepDump read_step_dump(const fs::path& dir, const StepReadOptions& options) {
  const fs::path meta_path = dir / kStepJson;
  nlohmann::json meta;
  try {
    meta = storage::read_json_file(meta_path);
  } catch (const std::exception& e) {
    fail(meta_path, e.what());
  }
  StepDump d;
  d.dir = dir;
  golden::ModelCaseHeader h;
  try {
    formats::StrictObject top(meta, meta_path.string());
    const std::string format = top.string("format", top.required("format"));
    if (format != kStepDumpFormat)
      fail(meta_path, "format '" + format + "' is not supported; this build reads '" + kStepDumpFormat + "'");
    d.producer = top.optional_string("producer").value_or("");
    if (const nlohmann::json* notes = top.find("notes"); notes && !notes->is_object())
      fail(meta_path, "notes must be an object");
    formats::StrictObject layout(top.required("layout"), meta_path.string() + ": layout");
    d.layout.world = layout.integer("world", layout.required("world"));
    d.layout.tp = layout.integer("tp", 1);
    d.layout.cp = layout.integer("cp", 1);
    d.layout.pp = layout.integer("pp", 1);
    d.layout.ep = layout.integer("ep", 1);
    d.layout.etp = layout.integer("etp", 1);
    d.vpp = layout.integer("vpp", 1);
    if (d.vpp < 1) fail(meta_path, "layout: vpp must be >= 1");
    layout.reject_unknown();
    d.layout.validate();
    if (const nlohmann::json* o = top.find("optimizer")) d.optimizer = read_optimizer(*o, meta_path);
    if (const nlohmann::json* g = top.find("grad_ranges"))
      d.grad_ranges = read_grad_ranges(*g, d.layout.world, meta_path.string());
    if (const nlohmann::json* r = top.find("reported")) {
      formats::StrictObject reported(*r, meta_path.string() + ": reported");
      if (const nlohmann::json* norms = reported.find("grad_norm")) {
        if (!norms->is_array() || static_cast<int>(norms->size()) != d.layout.world)
          fail(meta_path, "reported.grad_norm: one norm per rank (" + std::to_string(d.layout.world) + ")");
        for (const auto& n : *norms) {
          if (!n.is_number() || !std::isfinite(n.get<double>()) || n.get<double>() < 0)
            fail(meta_path, "reported.grad_norm: " + n.dump() + " is not a norm (a finite number >= 0)");
          d.reported_grad_norm.push_back(n.get<double>());
        }
      }
      if (const nlohmann::json* loss = reported.find("lm_loss")) {
        if (!loss->is_number() || !std::isfinite(loss->get<double>()) || loss->get<double>() < 0)
          fail(meta_path, "reported.lm_loss: " + loss->dump() + " is not a loss (a finite number >= 0)");
        d.reported_lm_loss = loss->get<double>();
      }
      reported.reject_unknown();
    }
    // The rest is a golden model case's header: the model, the batch and the loss mode under the same rules.
    nlohmann::json as_case{{"format", golden::kModelCaseFormat},
                           {"config", top.required("config")},
                           {"model", top.required("model")},
                           {"layout", {{"tp", d.layout.tp}, {"cp", d.layout.cp}, {"dp", d.layout.dp()}}},
                           {"batch", top.required("batch")},
                           {"loss_mode", top.required("loss_mode")}};
    const Tolerance golden_row = tolerance(Compared::golden_case, Precision::float64);
    as_case["tolerance"] = {{"rtol", golden_row.rtol}, {"atol", golden_row.atol}};
    top.reject_unknown();
    h = golden::model_case_header_from_json(as_case, meta_path.string());
  } catch (const golden::CaseFormatError& e) {
    throw DumpError(e.what());
  } catch (const std::invalid_argument& e) {
    fail(meta_path, e.what());
  }
  if (!options.semantics.empty()) {
    try {
      h.model.layer.semantics = Semantics::parse(options.semantics);
    } catch (const std::invalid_argument& e) {
      fail(meta_path, std::string("--semantics: ") + e.what());
    }
  }
  if (h.model.num_layers % (d.layout.pp * d.vpp) != 0)
    fail(meta_path, "layout: pp " + std::to_string(d.layout.pp) + " × vpp " + std::to_string(d.vpp) +
                        " does not divide the model's " + std::to_string(h.model.num_layers) +
                        " layers (a model chunk holds num_layers / (pp·vpp) of them)");
  d.model = h.model;
  d.seq = h.seq;
  d.global_batch = h.global_batch;
  d.micro_batch = h.micro_batch;
  d.loss_mode = h.loss_mode;
  if (options.precision) {
    d.precision = *options.precision;
    d.precision_stated = true;
  }

  // Everything the oracle and the comparison hold at once, before any file is read: the global step, the inputs
  // and every rank's gradients (at most one model's worth each).
  const std::uint64_t params = model_param_bytes(d.model);
  // With an optimizer: the parameters after the step too, the initial ones kept, three updates per tensor at once.
  // A reported lm loss outside per-token mode runs the oracle's step again in that mode (step_update.cpp) while the
  // first run's gradients are held: one more model's worth.
  const bool second_step = d.reported_lm_loss && d.loss_mode != LossMode::per_token;
  // An optimizer's state: two moments per rank, two bands each at once.
  const std::uint64_t world = static_cast<std::uint64_t>(d.layout.world),
                      state_copies = d.optimizer && d.optimizer->state ? 2 * world + 4 : 0;
  const bool from_moments = d.optimizer && d.optimizer->steps_before > 0;  // two more whole models in inputs/
  const std::uint64_t copies = (d.optimizer ? 6 + 2 * world : 2 + world) + state_copies + (from_moments ? 2 : 0) +
                               (second_step ? 1 : 0);
  require_memory(global_step_bytes(d.model, d.seq, d.global_batch) + params * copies,
                 "comparing the step dump " + dir.string());

  golden::ModelCase inputs;
  inputs.header = h;
  std::map<std::string, golden::ModelTensorSpec> input_specs;
  std::set<std::string> input_stems;
  for (auto& s : golden::model_input_specs(h)) {
    input_stems.insert(s.stem);
    input_specs.emplace(s.stem, std::move(s));
  }
  std::set<std::string> moment_stems;  // a later step's: the moments it started from, whole, beside the parameters
  if (from_moments)
    for (const auto& s : golden::model_output_specs(h)) {
      if (s.stem.rfind("grad.", 0) != 0) continue;
      for (const char* moment : {"exp_avg.", "exp_avg_sq."}) {
        golden::ModelTensorSpec m = s;
        m.stem = moment + s.stem.substr(5);
        moment_stems.insert(m.stem);
        input_stems.insert(m.stem);
        input_specs.emplace(m.stem, std::move(m));
      }
    }
  const auto checked = [](const std::map<std::string, golden::ModelTensorSpec>& specs) {
    return [&specs](const std::string& name, const formats::NpyArray& a) {
      const golden::ModelTensorSpec& s = specs.at(name);
      // Parameters may be float32 (widened exactly); the batch is as the golden case has it.
      const formats::NpyDtype dtype = s.dtype == formats::NpyDtype::f8 && a.dtype == formats::NpyDtype::f4
                                         ? formats::NpyDtype::f4 : s.dtype;
      golden::check_dtype_and_shape(name, a, dtype, s.shape);
    };
  };
  if (!fs::is_directory(dir / "inputs"))
    fail(dir / "inputs", "missing: a step dump holds the step's inputs (the batch and the parameters it started from)");
  try {
    inputs.tensors = golden::read_case_tensors(dir / "inputs", input_stems, checked(input_specs));
    for (const std::string& stem : moment_stems) {
      d.initial_moments.emplace(stem, std::move(inputs.tensors.at(stem)));
      inputs.tensors.erase(stem);
    }
    const golden::ModelOracleInputs in = golden::model_oracle_inputs(inputs);
    d.batch = in.batch;
    d.params = in.params;
    if (d.optimizer) d.initial = std::move(inputs.tensors);
  } catch (const golden::CaseFormatError& e) {
    throw DumpError(e.what());
  } catch (const formats::NpyError& e) {
    throw DumpError(e.what());
  }

  // Each rank's gradients: exactly those of the parameters it holds.
  const ProcessGroups groups(d.layout);
  std::vector<golden::ModelTensorSpec> grad_specs;
  for (const auto& s : golden::model_output_specs(h))
    if (s.stem.rfind("grad.", 0) == 0) grad_specs.push_back(s);
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name == kStepJson || name == "inputs") continue;
    // Exactly rank0 … rank<world-1>: "rank00" or "rank4" of a world of 4 would be a folder nothing reads.
    bool rank_folder = false;
    for (int r = 0; r < d.layout.world && !rank_folder; ++r) rank_folder = name == "rank" + std::to_string(r);
    if (!rank_folder)
      fail(entry.path(), "not part of a step dump of " + std::to_string(d.layout.world) + " ranks (step.json, "
                         "inputs/, rank0/ … rank" + std::to_string(d.layout.world - 1) + "/)");
  }
  GradRangeTiling tiling;
  for (int r = 0; r < d.layout.world; ++r) {
    const fs::path rank_dir = dir / ("rank" + std::to_string(r));
    if (!fs::is_directory(rank_dir)) fail(rank_dir, "missing: every rank's gradients are compared");
    std::map<std::string, golden::ModelTensorSpec> specs;
    std::set<std::string> stems;
    std::set<std::string> ranged;  // the stems of this rank's grad_ranges it holds
    for (auto s : grad_specs) {
      const std::string stem = s.stem.substr(5);
      if (!holds(stem, groups, r, d.model, d.vpp)) continue;
      const ParameterShard shard = parameter_shard(stem, groups, r);
      s.shape = shard_shape(s.shape, shard);
      if (d.optimizer) {  // the parameter after the step, beside its gradient
        golden::ModelTensorSpec after = s;
        after.stem = "param." + stem;
        stems.insert(after.stem);
        specs.emplace(after.stem, std::move(after));
      }
      if (!d.grad_ranges.empty()) {  // a distributed optimizer's range of the shard, or no gradient at all
        const auto it = d.grad_ranges[static_cast<size_t>(r)].find(stem);
        if (it == d.grad_ranges[static_cast<size_t>(r)].end()) continue;
        std::int64_t elements = 1;
        for (std::int64_t n : s.shape) elements *= n;
        if (it->second.end > elements)
          fail(meta_path, "grad_ranges[" + std::to_string(r) + "]." + stem + ": [" + std::to_string(it->second.start) +
                              ", " + std::to_string(it->second.end) + ") is outside its shard of " +
                              std::to_string(elements) + " elements");
        // Each data-parallel group the distributed optimizer shards over tiles the shard its ranks all hold.
        const GroupKind dp = optimizer_group(stem);
        tiling.add(stem + " (shard " + std::to_string(shard.index) + " over the " + std::string(to_string(dp)) +
                       " group of rank " + std::to_string(groups.group(dp, r).front()) + ")",
                   elements, it->second, r);
        ranged.insert(stem);
        s.shape = {it->second.size()};
      }
      if (d.optimizer && d.optimizer->state)  // Adam's moments, shaped as the gradient they were made from
        for (const char* moment : {"state.exp_avg.", "state.exp_avg_sq."}) {
          golden::ModelTensorSpec m = s;
          m.stem = moment + stem;
          stems.insert(m.stem);
          specs.emplace(m.stem, std::move(m));
        }
      stems.insert(s.stem);
      specs.emplace(s.stem, std::move(s));
    }
    if (!d.grad_ranges.empty())
      for (const auto& [stem, range] : d.grad_ranges[static_cast<size_t>(r)])
        if (!ranged.count(stem))
          fail(meta_path, "grad_ranges[" + std::to_string(r) + "]." + stem + ": rank " + std::to_string(r) +
                              " holds no such parameter");
    if (d.optimizer)
      for (const auto& s : input_specs)
        if (s.first.find(".expert_bias") != std::string::npos && holds(s.first, groups, r, d.model, d.vpp)) {
          golden::ModelTensorSpec after = s.second;
          after.stem = "param." + s.first;
          stems.insert(after.stem);
          specs.emplace(after.stem, std::move(after));
        }
    try {
      auto read = golden::read_case_tensors(rank_dir, stems, checked(specs));
      std::map<std::string, formats::NpyArray> grads, after, state;
      for (auto& [stem, a] : read) {
        if (stem.rfind("grad.", 0) == 0) grads.emplace(stem.substr(5), std::move(a));
        else if (stem.rfind("state.", 0) == 0) state.emplace(stem.substr(6), std::move(a));
        else after.emplace(stem.substr(6), std::move(a));
      }
      d.grads.push_back(std::move(grads));
      if (d.optimizer) d.params_after.push_back(std::move(after));
      if (d.optimizer && d.optimizer->state) d.state.push_back(std::move(state));
    } catch (const golden::CaseFormatError& e) {
      throw DumpError(e.what());
    } catch (const formats::NpyError& e) {
      throw DumpError(e.what());
    }
  }
  if (const std::string gap = tiling.check(); !gap.empty()) fail(meta_path, "grad_ranges: " + gap);
  return d;
}

const char* to_string(ParameterClass c) {
  switch (c) {
    case ParameterClass::embedding: return "embedding";
    case ParameterClass::norms: return "norms";
    case ParameterClass::attention: return "attention";
    case ParameterClass::router: return "router";
    case ParameterClass::experts: return "experts";
    case ParameterClass::shared_expert: return "shared expert";
    case ParameterClass::mtp_projection: return "MTP projection";
    case ParameterClass::head: return "output layer";
  }
  return "?";
}

ParameterClass parameter_class(const std::string& stem) {
  if (stem == "embedding") return ParameterClass::embedding;
  if (stem == "head") return ParameterClass::head;
  if (stem.find("norm") != std::string::npos) return ParameterClass::norms;
  if (stem.find(".attention_w") != std::string::npos) return ParameterClass::attention;
  if (stem.find("router") != std::string::npos) return ParameterClass::router;
  if (stem.find(".expert_fc") != std::string::npos) return ParameterClass::experts;
  if (stem.find(".shared_") != std::string::npos) return ParameterClass::shared_expert;
  if (stem.find(".eh_proj") != std::string::npos) return ParameterClass::mtp_projection;
  return ParameterClass::embedding;
}

bool StepComparison::pass() const {
  const auto ok = [](const StepTensorResult& t) { return t.pass(); };
  return std::all_of(tensors.begin(), tensors.end(), ok) && std::all_of(after.begin(), after.end(), ok) &&
         std::all_of(state.begin(), state.end(), ok) && (!grad_norm || grad_norm->pass()) &&
         (!lm_loss || lm_loss->pass());
}

const StepTensorResult* StepComparison::first_failure() const {
  for (const auto* list : {&tensors, &after, &state})
    for (const auto& t : *list)
      if (!t.pass()) return &t;
  return nullptr;
}

const StepTensorResult* StepComparison::worst_failure() const {
  // A gradient first: a wrong gradient moves the parameters after the step too, and where the bug is is in it.
  for (const auto* list : {&tensors, &after, &state}) {
    const StepTensorResult* worst = nullptr;
    for (const auto& t : *list)
      if (!t.pass() && (!worst || t.worst > worst->worst)) worst = &t;
    if (worst) return worst;
  }
  return nullptr;
}

golden::ModelCaseHeader oracle_header(const StepDump& d) {
  golden::ModelCaseHeader h;
  h.model = d.model;
  h.tp = d.layout.tp;
  h.cp = d.layout.cp;
  h.dp = d.layout.dp();
  h.seq = d.seq;
  h.global_batch = d.global_batch;
  h.micro_batch = d.micro_batch;
  h.loss_mode = d.loss_mode;
  return h;
}

StepComparison compare_step_dump(const StepDump& d) {
  const std::map<std::string, formats::NpyArray> oracle =
      golden::model_oracle_outputs(oracle_header(d), {d.params, d.batch});

  const ProcessGroups groups(d.layout);
  StepComparison c;
  c.tolerance = tolerance(Compared::training_step, d.precision);
  c.objective = oracle.at("objective").reals.at(0);
  for (const auto& [name, want_array] : oracle) {
    if (name.rfind("grad.", 0) != 0) continue;
    const std::string stem = name.substr(5);
    StepTensorResult t;
    t.stem = stem;
    t.cls = parameter_class(stem);
    // Each rank's shard of the oracle's whole gradient, beside what that rank holds.
    std::map<int, std::vector<double>> wants;
    double dot = 0, norm = 0;
    for (int r = 0; r < d.layout.world; ++r) {
      const auto it = d.grads[static_cast<size_t>(r)].find(stem);
      if (it == d.grads[static_cast<size_t>(r)].end()) continue;
      t.ranks.push_back(r);
      const std::vector<double>& got = it->second.reals;
      const std::vector<double> whole_shard =
          take_shard(want_array.reals, want_array.shape, parameter_shard(stem, groups, r));
      t.elements = static_cast<std::int64_t>(whole_shard.size());
      const GradRange range = d.grad_range(r, stem, t.elements);  // a distributed optimizer's part of the shard
      const std::int64_t offset = range.start;
      const std::vector<double>& shard = wants[r] =
          std::vector<double>(whole_shard.begin() + range.start, whole_shard.begin() + range.end);
      for (size_t i = 0; i < got.size(); ++i) {
        const double want = shard[i], diff = saturated(std::abs(got[i] - want));
        const double ratio = saturated(diff / (c.tolerance.atol + c.tolerance.rtol * std::abs(want)));
        t.max_abs = std::max(t.max_abs, diff);
        if (ratio > 1 && t.first_rank < 0) {
          t.first_rank = r;
          t.first_index = offset + static_cast<std::int64_t>(i);
          t.got = got[i];
          t.want = want;
        }
        t.worst = std::max(t.worst, ratio);
        dot += got[i] * want;
        norm += want * want;
      }
    }
    if (norm > 0) {
      t.scale = dot / norm;
      double residual = 0;
      for (int r : t.ranks) {
        const std::vector<double>& got = d.grads[static_cast<size_t>(r)].at(stem).reals;
        const std::vector<double>& want = wants.at(r);
        for (size_t i = 0; i < got.size(); ++i) residual += std::pow(got[i] - t.scale * want[i], 2);
      }
      t.scatter = std::sqrt(residual / norm);
    }
    c.tensors.push_back(std::move(t));
  }
  // A class whose failing tensors are all one factor off (each well explained by its scale, the scales equal to
  // 0.1%): named with its scale and ranks, the missing factor in place of a wall of mismatching elements.
  for (ParameterClass cls : kParameterClasses) {
    std::vector<const StepTensorResult*> failing;
    for (const auto& t : c.tensors)
      if (t.cls == cls && !t.pass()) failing.push_back(&t);
    if (failing.empty()) continue;
    const double s = failing.front()->scale;
    if (std::abs(s - 1) <= 1e-3) continue;  // rounding, not a factor
    const bool one_factor = std::all_of(failing.begin(), failing.end(), [s](const StepTensorResult* t) {
      return t->scatter < 1e-3 && std::abs(t->scale - s) <= 1e-3 * std::abs(s);
    });
    if (!one_factor) continue;
    ScaleFinding f{cls, s, {}, static_cast<int>(failing.size())};
    std::set<int> ranks;
    for (const auto* t : failing) ranks.insert(t->ranks.begin(), t->ranks.end());
    f.ranks.assign(ranks.begin(), ranks.end());
    c.scales.push_back(std::move(f));
  }
  compare_step_end(d, oracle, c);
  return c;
}

}  // namespace moe::compare
