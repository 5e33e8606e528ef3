// The parallel system against the global step oracle, in double with tight tolerances: every dispatcher on
// layouts with EP, ETP, EP×ETP, EDP > 1, TP ≠ ETP, CP > 1; dropless, capacity drop and drop-and-pad; every
// scaling path; a zero-token rank.
#include "distributed/differential_check.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>

namespace moe::dist {
namespace {

ModelConfig base_model() {
  ModelConfig m;
  m.layer.hidden = 8;
  m.layer.num_experts = 8;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 4;
  m.layer.score_function = ScoreFunction::sigmoid;
  m.layer.expert_bias = true;
  m.layer.bias_update_rate = 1e-3;
  m.layer.shared_expert_ffn_hidden = 4;
  m.layer.aux_loss_type = AuxLossType::aux;
  m.layer.aux_loss_coeff = 0.1;
  m.layer.z_loss_coeff = 0.01;
  m.num_layers = 2;
  m.n_hash_layers = 1;
  m.vocab = 16;
  return m;
}

ParallelLayout layout(int world, int tp, int cp, int ep, int etp) {
  ParallelLayout l;
  l.world = world;
  l.tp = tp;
  l.cp = cp;
  l.ep = ep;
  l.etp = etp;
  return l;
}

struct Case {
  std::string name;
  ParallelLayout layout;
  DispatcherKind dispatcher = DispatcherKind::alltoall;
  LossMode mode = LossMode::sum;
  int micro_batch = 1;
  std::function<void(ModelConfig&)> change = [](ModelConfig&) {};
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> cases() {
  std::vector<Case> out;
  const std::vector<std::pair<std::string, ParallelLayout>> layouts = {
      {"single", layout(1, 1, 1, 1, 1)},     {"ep2", layout(2, 1, 1, 2, 1)},      {"etp2", layout(2, 1, 1, 1, 2)},
      {"ep2_etp2", layout(4, 1, 1, 2, 2)},   {"ep2_edp2", layout(4, 1, 1, 2, 1)}, {"tp2_ep2", layout(4, 2, 1, 2, 1)},
      {"cp2_ep2", layout(4, 1, 2, 2, 1)},    {"tp2_cp2_ep4_etp1", layout(8, 2, 2, 4, 1)},
      {"tp2_ep2_etp2", layout(8, 2, 1, 2, 2)}};
  for (auto kind : {DispatcherKind::alltoall, DispatcherKind::allgather, DispatcherKind::flex})
    for (const auto& [name, l] : layouts)
      out.push_back({std::string(to_string(kind)) + "_" + name, l, kind});
  for (auto mode : {LossMode::avg, LossMode::per_token})
    for (auto aux : {AuxLossType::seq_aux, AuxLossType::global_aux})
      out.push_back({std::string(to_string(aux)) + "_" + (mode == LossMode::avg ? "avg" : "per_token"),
                     layout(8, 2, 2, 4, 1), DispatcherKind::alltoall, mode, 1,
                     [aux](ModelConfig& m) { m.layer.aux_loss_type = aux; }});
  out.push_back({"capacity_drop_flex", layout(4, 2, 1, 2, 1), DispatcherKind::flex, LossMode::sum, 1,
                 [](ModelConfig& m) { m.layer.capacity_factor = 0.75; }});
  out.push_back({"capacity_pad_alltoall", layout(4, 1, 2, 2, 2), DispatcherKind::alltoall, LossMode::sum, 1,
                 [](ModelConfig& m) {
                   m.layer.capacity_factor = 1.0;
                   m.layer.drop_policy = DropPolicy::position;
                   m.layer.pad_to_capacity = true;
                 }});
  out.push_back({"latent_gate_clamp_allgather", layout(4, 2, 1, 2, 2), DispatcherKind::allgather, LossMode::sum, 2,
                 [](ModelConfig& m) {
                   m.layer.latent_size = 6;
                   m.layer.shared_expert_gate = true;
                   m.layer.swiglu_clamp = 0.5;
                   m.layer.shared_expert_clamp = true;
                 }});
  out.push_back({"softmax_groups_micro2", layout(4, 1, 1, 4, 1), DispatcherKind::flex, LossMode::per_token, 2,
                 [](ModelConfig& m) {
                   m.layer.score_function = ScoreFunction::softmax;
                   m.layer.expert_bias = false;
                   m.layer.bias_update_rate.reset();
                   m.layer.num_groups = 4;
                   m.layer.group_topk = 2;
                 }});
  return out;
}

class TrainStepTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainStepTest, MatchesTheGlobalStepOracle) {
  const Case& c = GetParam();
  CheckProblem p;
  p.config = base_model();
  c.change(p.config);
  p.params = random_model_params<double>(p.config, 31);
  // 8 sequences of 8 tokens, uneven padding (a sequence with no valid token at the end of the batch).
  p.batch = random_global_batch(p.config, 8, 8, 32, {0, 3, 0, 1, 0, 0, 5, 8});
  p.layout = c.layout;
  p.options = {c.dispatcher, c.mode, c.micro_batch};
  const GlobalStep oracle = oracle_step(p);
  const RankComparison r = check_inproc(p, oracle);
  for (int q = 0; q < kQuantities; ++q)
    RecordProperty(std::string(to_string(static_cast<Quantity>(q))), std::to_string(r.errors[static_cast<size_t>(q)].max_abs));
  EXPECT_TRUE(r.pass()) << "first mismatch: " << r.first.tensor << " on rank " << r.first.rank << " at "
                        << r.first.index << ": got " << r.first.got << ", want " << r.first.want;
  EXPECT_GT(r.errors[static_cast<size_t>(Quantity::grad_expert)].compared, 0);
}

INSTANTIATE_TEST_SUITE_P(Layouts, TrainStepTest, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace moe::dist
