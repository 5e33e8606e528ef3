#include "cli/check/check_coverage.hpp"

#include <algorithm>
#include <string_view>

namespace moe::cli {
namespace {

// One run of a row, as the features are judged on it.
struct Run {
  const CheckRow& row;
  const ParallelLayout& l;
  const ModelConfig& m;
  const MoeConfig& c;
  bool routed;  // some layer routes by score (not every layer a hash layer)
};

struct Feature {
  std::string_view name;
  bool (*on)(const Run&);
};

// The layer's and the model's options, then the batch.
constexpr Feature kModelFeatures[] = {
    {"softmax", [](const Run& r) { return r.c.score_function == ScoreFunction::softmax && !r.c.pre_softmax; }},
    {"pre-softmax", [](const Run& r) { return r.c.pre_softmax; }},
    {"sigmoid", [](const Run& r) { return r.c.score_function == ScoreFunction::sigmoid; }},
    {"sqrtsoftplus", [](const Run& r) { return r.c.score_function == ScoreFunction::sqrtsoftplus; }},
    {"deepseek normalisation",
     [](const Run& r) { return r.c.uses_score_normalisation() && r.c.normalization == Normalization::deepseek; }},
    {"topk scaling", [](const Run& r) { return r.c.topk_scaling_factor != 1.0; }},
    {"expert bias", [](const Run& r) { return r.c.expert_bias && r.routed; }},
    {"bias update", [](const Run& r) { return r.c.bias_update_rate.has_value() && r.routed; }},
    {"groups (k/group_topk > 2)",
     [](const Run& r) { return r.c.num_groups > 0 && r.c.topk / r.c.group_topk > 2 && r.routed; }},
    {"hash layers", [](const Run& r) { return r.m.n_hash_layers > 0; }},
    {"swiglu clamp", [](const Run& r) { return r.c.swiglu_clamp.has_value(); }},
    {"shared expert", [](const Run& r) { return r.c.has_shared_expert(); }},
    {"shared gate", [](const Run& r) { return r.c.shared_expert_gate; }},
    {"shared clamp", [](const Run& r) { return r.c.shared_clamp().has_value(); }},
    {"latent", [](const Run& r) { return r.c.latent_size > 0; }},
    {"probs on input", [](const Run& r) { return r.c.apply_probs_on_input; }},
    {"fp8 dispatch", [](const Run& r) { return r.c.fp8_dispatch; }},
    {"bf16 storage", [](const Run& r) { return r.c.bf16_storage; }},
    {"bf16 main parameters", [](const Run& r) { return r.c.bf16_storage && r.row.steps > 0; }},
    {"capacity by probs",
     [](const Run& r) { return r.c.capacity_factor.has_value() && r.c.drop_policy == DropPolicy::probs; }},
    {"capacity by position",
     [](const Run& r) { return r.c.capacity_factor.has_value() && r.c.drop_policy == DropPolicy::position; }},
    {"pad to capacity", [](const Run& r) { return r.c.pad_to_capacity; }},
    {"aux", [](const Run& r) { return r.c.aux_loss_type == AuxLossType::aux; }},
    {"seq_aux", [](const Run& r) { return r.c.aux_loss_type == AuxLossType::seq_aux; }},
    {"global_aux", [](const Run& r) { return r.c.aux_loss_type == AuxLossType::global_aux; }},
    {"z-loss", [](const Run& r) { return r.c.z_loss_coeff > 0; }},
    {"padding",
     [](const Run& r) {
       const auto padded = r.row.run.padded(r.row.run.global_batch);
       return std::any_of(padded.begin(), padded.end(), [](int n) { return n > 0; });
     }},
    {"micro-batch ≥ 2", [](const Run& r) { return r.row.run.micro_batch >= 2; }},
};
// (then every loss mode by its name)
constexpr Feature kLayoutFeatures[] = {
    {"tp", [](const Run& r) { return r.l.tp > 1; }},   {"cp", [](const Run& r) { return r.l.cp > 1; }},
    {"pp", [](const Run& r) { return r.l.pp > 1; }},   {"interleaved pp", [](const Run& r) { return r.l.vpp > 1; }},
    {"ep", [](const Run& r) { return r.l.ep > 1; }},   {"etp", [](const Run& r) { return r.l.etp > 1; }},
    {"edp", [](const Run& r) { return r.l.edp() > 1; }}, {"gtp", [](const Run& r) { return r.l.gtp > 1; }},
    {"egtp", [](const Run& r) { return r.l.egtp > 1; }},
};
// (then every dispatcher by its name)
constexpr Feature kRunFeatures[] = {
    {"attention", [](const Run& r) { return r.m.has_attention(); }},
    {"cp all_gather",
     [](const Run& r) {
       return r.m.has_attention() && r.l.cp > 1 && r.row.cp_comm_type == dist::KvExchange::all_gather;
     }},
    {"cp p2p",
     [](const Run& r) { return r.m.has_attention() && r.l.cp > 1 && r.row.cp_comm_type == dist::KvExchange::p2p; }},
    {"mtp", [](const Run& r) { return r.m.mtp_depth > 0; }},
    {"mtp depth ≥ 2", [](const Run& r) { return r.m.mtp_depth >= 2; }},
    {"training steps", [](const Run& r) { return r.row.steps > 0; }},
    {"distributed optimizer", [](const Run& r) { return r.row.steps > 0 && r.row.distributed_optimizer; }},
    {"gradient clipping", [](const Run& r) { return r.row.steps > 0 && r.row.clip_grad > 0; }},
    {"muon", [](const Run& r) { return r.row.steps > 0 && r.row.optimizer == OptimizerKind::muon; }},
    {"resume under another layout", [](const Run& r) { return !r.row.resume_as.empty(); }},
    {"replicated hot experts", [](const Run& r) { return r.row.hot_expert_slots > 0 && r.l.ep > 1; }},
    {"wave-scheduled EP", [](const Run& r) { return r.row.expert_waves > 1; }},
};
// (then the semantics deviations the oracle models, and the GTP factor)

// Deviations the coverage line names: what the oracle computes differently under them, and the GTP factor (a
// scaling deviation that shows only where gtp ≠ egtp).
bool named_deviation(const DeviationInfo& d) {
  return d.kind == DeviationKind::modelled || d.id == Deviation::gtp_factor_missing;
}

// Whether a deviation in effect changes what this run computes.
bool deviation_acts(Deviation d, const Run& r) {
  if (d == Deviation::gtp_factor_missing) return r.l.gtp != r.l.egtp;
  return deviation_info(d).kind == DeviationKind::modelled && (d != Deviation::mtp_per_token_local_ratio ||
                                                               r.m.mtp_depth > 0);
}

void add_names(std::span<const Feature> table, std::vector<std::string>& out) {
  for (const Feature& f : table) out.emplace_back(f.name);
}

void add_on(std::span<const Feature> table, const Run& run, std::set<std::string>& out) {
  for (const Feature& f : table)
    if (f.on(run)) out.emplace(f.name);
}

}  // namespace

const std::vector<std::string>& all_features() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n;
    add_names(kModelFeatures, n);
    for (const auto& mode : names_of(LossMode{})) n.emplace_back(mode.name);
    add_names(kLayoutFeatures, n);
    for (const auto& kind : names_of(dist::DispatcherKind{})) n.emplace_back(kind.name);
    add_names(kRunFeatures, n);
    for (const auto& d : deviation_catalogue())
      if (named_deviation(d)) n.emplace_back(d.name);
    return n;
  }();
  return names;
}

std::set<std::string> features_of(const CheckRow& row, const ParallelLayout& l, dist::DispatcherKind dispatcher) {
  const ModelConfig m = row.run.model();
  const Run run{row, l, m, m.layer, m.n_hash_layers < m.num_layers};
  std::set<std::string> f;
  add_on(kModelFeatures, run, f);
  f.emplace(to_string(row.run.mode()));
  add_on(kLayoutFeatures, run, f);
  f.emplace(to_string(dispatcher));
  add_on(kRunFeatures, run, f);
  for (Deviation d : m.semantics().in_mode(row.run.mode()).deviations())
    if (deviation_acts(d, run)) f.emplace(deviation_info(d).name);
  return f;
}

}  // namespace moe::cli
