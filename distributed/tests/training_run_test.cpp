// Whole training steps against the oracle's trajectory: pipelines of 1, 2 and 4 stages, DDP and the distributed
// optimizer, SUM and AVG, Adam and SGD; checkpoints saved under one layout and resumed under another; corrupt
// and mismatched checkpoints refused without touching the running model.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "distributed/check/differential_check.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "reference/tests/expect_error.hpp"

namespace moe::dist {
namespace {

namespace fs = std::filesystem;

ModelConfig model() {
  ModelConfig m;
  m.layer.hidden = 8;
  m.layer.num_experts = 8;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 4;
  m.layer.score_function = ScoreFunction::sqrtsoftplus;
  m.layer.expert_bias = true;
  m.layer.bias_update_rate = 1e-2;
  m.layer.shared_expert_ffn_hidden = 4;
  m.layer.aux_loss_type = AuxLossType::seq_aux;
  m.layer.aux_loss_coeff = 0.05;
  m.num_layers = 4;
  m.n_hash_layers = 1;
  m.vocab = 16;
  return m;
}

RunProblem run(const ParallelLayout& l, LossMode mode, bool distributed, int steps = 3) {
  RunProblem p;
  p.config = model();
  p.params = random_model_params<double>(p.config, 51);
  for (int s = 0; s < steps; ++s)
    p.batches.push_back(
        random_global_batch(p.config, 8, 8, 52 + static_cast<std::uint64_t>(s), {0, 1, 0, 0, 3, 0, 0, 2}));
  p.layout = l;
  p.options.mode = mode;
  p.options.micro_batch = 1;
  p.optimizer.config.kind = OptimizerKind::adam;
  p.optimizer.config.adam = {1e-2, 0.9, 0.95, 1e-8, 0.01};
  p.optimizer.distributed = distributed;
  return p;
}

void expect_all_steps_pass(const std::vector<RankComparison>& steps, size_t expected_steps) {
  ASSERT_EQ(steps.size(), expected_steps);
  for (size_t s = 0; s < steps.size(); ++s) {
    EXPECT_TRUE(steps[s].pass()) << "step " << s << ": " << steps[s].first.tensor << " on rank " << steps[s].first.rank
                                 << " at " << steps[s].first.index << ": " << steps[s].first.got << " vs "
                                 << steps[s].first.want;
    EXPECT_GT(steps[s].errors[static_cast<size_t>(Quantity::optimizer_state)].compared, 0);
  }
}

struct Case {
  std::string name;
  ParallelLayout layout;
  LossMode mode;
  bool distributed;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TrainingRunTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainingRunTest, FollowsTheOracleTrajectory) {
  const Case& c = GetParam();
  const RunProblem p = run(c.layout, c.mode, c.distributed);
  expect_all_steps_pass(check_run_inproc(p, oracle_trajectory(p)), 3);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, TrainingRunTest,
    ::testing::Values(
        Case{"pp1_ep2_edp2_ddp_sum", ParallelLayout{.world = 4, .ep = 2}, LossMode::sum, false},
        Case{"pp1_ep2_edp2_distopt_avg", ParallelLayout{.world = 4, .ep = 2}, LossMode::avg, true},
        Case{"pp2_tp2_ep2_distopt_sum", ParallelLayout{.world = 8, .tp = 2, .pp = 2, .ep = 2}, LossMode::sum, true},
        Case{"pp2_ep2_etp2_ddp_avg", ParallelLayout{.world = 8, .pp = 2, .ep = 2, .etp = 2}, LossMode::avg, false},
        Case{"pp4_ep2_distopt_per_token", ParallelLayout{.world = 8, .pp = 4, .ep = 2}, LossMode::per_token, true},
        Case{"pp4_ddp_sum", ParallelLayout{.world = 4, .pp = 4}, LossMode::sum, false}),
    [](const auto& param_info) { return param_info.param.name; });

TEST(TrainingRun, SgdWithTheDistributedOptimizer) {
  RunProblem p = run(ParallelLayout{.world = 8, .tp = 2, .ep = 4}, LossMode::sum, true, 2);
  p.optimizer.config.kind = OptimizerKind::sgd;
  p.optimizer.config.sgd.lr = 0.1;
  const auto steps = check_run_inproc(p, oracle_trajectory(p));
  ASSERT_EQ(steps.size(), 2u);
  for (const auto& s : steps) EXPECT_TRUE(s.pass()) << s.first.tensor;
}

// Save under one layout after half the steps, resume under another: experts are found by global id, fc1 halves
// stay paired across ETP changes, the optimizer state and expert biases carry over.
TEST(TrainingRun, ResumesUnderAnotherLayout) {
  const fs::path dir = fs::temp_directory_path() / "moe_oracle_resume_test";
  struct Pair {
    ParallelLayout save, resume;
  };
  for (const Pair& pair :
       {Pair{ParallelLayout{.world = 8, .pp = 2, .ep = 4}, ParallelLayout{.world = 4, .ep = 2, .etp = 2}},
        Pair{ParallelLayout{.world = 4, .ep = 2, .etp = 2}, ParallelLayout{.world = 8, .pp = 2, .ep = 4}}}) {
    fs::remove_all(dir);
    RunProblem p = run(pair.save, LossMode::sum, true, 4);
    p.resume_as = pair.resume;
    p.checkpoint_dir = dir.string();
    expect_all_steps_pass(check_run_inproc(p, oracle_trajectory(p)), 4);
    EXPECT_TRUE(fs::exists(dir / "checkpoint.json"));
    // The checkpoint says which release wrote it, and the semantics its optimizer state belongs to.
    const auto meta = nlohmann::json::parse(std::ifstream(dir / "checkpoint.json"));
    EXPECT_EQ(meta.at("written_by").get<std::string>().rfind("moe-oracle ", 0), 0u);
    EXPECT_EQ(meta.at("model").at("semantics"), "intended");
  }
  fs::remove_all(dir);
}

// Muon: three steps where TP cuts the shared expert and ETP the experts (both gathered whole at their owners), with
// pipeline stages and clipping; then saved and resumed under another layout, the momentum carried by the checkpoint.
RunProblem muon_run(const ParallelLayout& l, int steps) {
  RunProblem p = run(l, LossMode::sum, false, steps);
  p.optimizer.config.kind = OptimizerKind::muon;
  p.optimizer.config.muon = {.lr = 1e-2, .momentum = 0.9, .nesterov = true, .weight_decay = 0.01, .extra_scale = 0.2};
  p.tolerance = tolerance(Compared::muon_step, Precision::float64);
  return p;
}

TEST(TrainingRun, MuonFollowsTheOracleTrajectory) {
  for (const ParallelLayout& l : {ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2},
                                  ParallelLayout{.world = 8, .pp = 2, .ep = 2, .etp = 2},
                                  ParallelLayout{.world = 4, .tp = 2, .ep = 4}}) {
    RunProblem p = muon_run(l, 3);
    p.optimizer.config.clip_grad = 0.5;
    expect_all_steps_pass(check_run_inproc(p, oracle_trajectory(p)), 3);
  }
}

TEST(TrainingRun, MuonResumesUnderAnotherLayout) {
  const fs::path dir = fs::temp_directory_path() / "moe_oracle_muon_resume_test";
  fs::remove_all(dir);
  RunProblem p = muon_run(ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2}, 4);
  p.resume_as = ParallelLayout{.world = 4, .pp = 2, .ep = 2};
  p.checkpoint_dir = dir.string();
  expect_all_steps_pass(check_run_inproc(p, oracle_trajectory(p)), 4);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(dir / "checkpoint.json")).at("moments"), "muon");
  fs::remove_all(dir);
}

TEST(TrainingRun, MuonRefusesTheDistributedOptimizer) {
  RunProblem p = muon_run(ParallelLayout{.world = 2, .ep = 2}, 1);
  p.optimizer.distributed = true;
  EXPECT_THROW(check_run_inproc(p, oracle_trajectory(p)), std::invalid_argument);
}

// Replicas and waves together are refused before the first step (the layers would only see a plan at step 2).
TEST(TrainingRun, ReplicasWithWavesAreRefusedUpFront) {
  RunProblem p = run(ParallelLayout{.world = 2, .ep = 2}, LossMode::sum, false, 1);
  p.options.hot_expert_slots = 1;
  p.options.expert_waves = 2;
  InprocWorld(p.layout.world).run([&](Communicator& world) {
    const ProcessGroups groups(p.layout);
    const RankGroups comms(world, groups);
    EXPECT_THROW(RankTrainer(p.config, p.params, groups, comms, p.options, p.optimizer), std::invalid_argument);
  });
}

// A checkpoint written by `p` after one step, in a fresh directory.
fs::path write_checkpoint(const RunProblem& p, const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  InprocWorld(p.layout.world).run([&](Communicator& world) {
    const ProcessGroups groups(p.layout);
    const RankGroups comms(world, groups);
    RankTrainer trainer(p.config, p.params, groups, comms, p.options, p.optimizer);
    trainer.step(p.batches[0]);
    trainer.save(dir.string(), world);
  });
  return dir;
}

void expect_refused(const fs::path& dir, const ModelConfig& config, const std::string& fragment) {
  test::expect_error<std::runtime_error>(fragment, [&] { (void)load_checkpoint(dir.string(), config); });
}

TEST(Checkpoint, RefusesCorruptOrMismatchedCheckpoints) {
  const RunProblem p = run(ParallelLayout{.world = 4, .ep = 2, .etp = 2}, LossMode::sum, true, 1);
  const fs::path dir = write_checkpoint(p, "moe_oracle_corrupt_test");
  ASSERT_NO_THROW((void)load_checkpoint(dir.string(), p.config));

  ModelConfig other = p.config;
  other.layer.num_experts = 16;
  expect_refused(dir, other, "another model");

  // Truncate one expert piece, then flip a byte of another: both named.
  fs::path victim;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().rfind("layer1.expert3.fc2", 0) == 0) victim = f.path();
  ASSERT_FALSE(victim.empty());
  const auto size = fs::file_size(victim);
  fs::resize_file(victim, size - 8);
  expect_refused(dir, p.config, "truncated or corrupt");
  fs::resize_file(victim, size);
  expect_refused(dir, p.config, "checksum");

  fs::remove(dir / "checkpoint.json");
  expect_refused(dir, p.config, "no checkpoint.json");
  fs::remove_all(dir);
}

// Muon's momentum and Adam's first moment share the .adam_m slot: the optimizer that wrote them is recorded and a run
// under the other one refuses them.
TEST(Checkpoint, MomentsOfOneOptimizerAreRefusedByTheOther) {
  const RunProblem muon = muon_run(ParallelLayout{.world = 2, .ep = 2}, 1);
  const fs::path dir = write_checkpoint(muon, "moe_oracle_moments_kind_test");
  const TrainingState state = load_checkpoint(dir.string(), muon.config);
  EXPECT_EQ(state.moments_of, OptimizerKind::muon);
  RunProblem adam = run(ParallelLayout{.world = 2, .ep = 2}, LossMode::sum, false, 1);
  InprocWorld(2).run([&](Communicator& world) {
    const ProcessGroups groups(adam.layout);
    const RankGroups comms(world, groups);
    test::expect_error<std::runtime_error>("written by Muon, this run's optimizer is Adam", [&] {
      RankTrainer trainer(adam.config, state, groups, comms, adam.options, adam.optimizer);
    });
  });
  fs::remove_all(dir);
}

TEST(Checkpoint, AFailedLoadLeavesTheRunningModelUnchanged) {
  RunProblem p = run(ParallelLayout{.world = 4, .ep = 2, .etp = 2}, LossMode::sum, false, 1);
  const fs::path dir = write_checkpoint(p, "moe_oracle_unchanged_test");
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().rfind("head", 0) == 0) fs::resize_file(f.path(), 3);
  InprocWorld(p.layout.world).run([&](Communicator& world) {
    const ProcessGroups groups(p.layout);
    const RankGroups comms(world, groups);
    RankTrainer trainer(p.config, p.params, groups, comms, p.options, p.optimizer);
    trainer.step(p.batches[0]);
    const ModelShard<double> before = trainer.params();
    EXPECT_THROW((void)load_checkpoint(dir.string(), p.config), std::runtime_error);
    const auto now = shard_tensors(trainer.params(), 0);
    ModelShard<double> copy = before;
    const auto then = shard_tensors(copy, 0);
    for (size_t i = 0; i < now.size(); ++i)
      for (Eigen::Index j = 0; j < now[i].size; ++j) ASSERT_EQ(now[i].data[j], then[i].data[j]) << now[i].name;
  });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe::dist
