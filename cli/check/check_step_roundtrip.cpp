#include "cli/check/check_step_roundtrip.hpp"

#include "compare/parameter_shard.hpp"
#include "compare/step_dump.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/rank_groups.hpp"
#include "distributed/train/rank_optimizer.hpp"
#include "distributed/train/train_step.hpp"
#include "formats/config_json.hpp"
#include "formats/npy.hpp"
#include "golden/model_case.hpp"
#include "reference/presets.hpp"
#include "reference/process_groups.hpp"
#include "reference/trajectory.hpp"
#include "storage/durable_files.hpp"

#include <nlohmann/json.hpp>

namespace moe::cli {
namespace {

namespace fs = std::filesystem;

enum class StepControl {
  none, experts_twice, gradient_left_out, grad_norm_off, parameter_moved, range_left_out, moment_off
};

constexpr int kSeq = 8, kBatch = 8, kMicroBatch = 1;
// The parameter the parameter_moved control moves after the step (on rank 2, element 0).
const std::string kMovedParameter = "head";
// The moment the moment control puts 1% off (rank 2's second moment of that parameter).
const std::string kMovedMoment = "exp_avg_sq." + kMovedParameter;
// The gradient range the range control leaves out of rank 1's dump (its data-parallel peer holds the other half).
const std::string kLeftOutRange = "final_norm";

ModelConfig step_model() {
  ModelConfig m;
  m.layer = layer_preset("tiny-v4").config;  // sigmoid routing, expert bias and its update, shared expert
  m.num_layers = 2;
  m.vocab = 16;
  return m;
}

formats::NpyArray real_array(const std::vector<Eigen::Index>& shape, const double* data, Eigen::Index size) {
  return formats::NpyArray::of_reals(std::vector<std::int64_t>(shape.begin(), shape.end()),
                                    std::vector<double>(data, data + size));
}

// The step's inputs as compare reads them: the batch and every parameter, whole, under the golden stems.
void write_inputs(const ModelConfig& m, ModelParams<double> params, const GlobalBatch& batch, const fs::path& dir) {
  fs::create_directories(dir);
  const auto put = [&](const std::string& stem, const formats::NpyArray& a) {
    formats::write_npy(dir / (stem + ".npy"), a);
  };
  const std::vector<std::int64_t> bs{batch.size, batch.seq};
  put("input_ids", formats::NpyArray::of_integers(bs, std::vector<std::int64_t>(batch.input_ids.data(),
                                                   batch.input_ids.data() + batch.input_ids.size())));
  put("labels", formats::NpyArray::of_integers(bs, std::vector<std::int64_t>(batch.labels.data(),
                                                batch.labels.data() + batch.labels.size())));
  std::vector<std::uint8_t> mask(batch.loss_mask.data(), batch.loss_mask.data() + batch.loss_mask.size());
  put("loss_mask", formats::NpyArray::of_booleans(bs, mask));
  for (const auto& v : trained_tensors(m, params)) put(golden::tensor_file_stem(v.name), real_array(v.shape, v.data, v.size));
  for (int l = 0; l < m.num_layers; ++l)
    if (m.layer_config(l).expert_bias) {
      const Vector<double>& b = params.layers[static_cast<size_t>(l)].expert_bias;
      put("layer" + std::to_string(l) + ".expert_bias", real_array({b.size()}, b.data(), b.size()));
    }
}

// The optimizer of every round trip: Adam with weight decay on every parameter (the parallel system decays all),
// clipping at a norm the step's gradients exceed.
OptimizerConfig step_optimizer() {
  OptimizerConfig o;
  o.kind = OptimizerKind::adam;
  o.adam = {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-3, .weight_decay = 0.1};
  o.clip_grad = 0.05;
  return o;
}

// A tensor of the parallel system's shard as the step dump has it on `rank` (compare/parameter_shard.hpp): where
// the parallel system holds the whole tensor (the embedding and the head under TP), Megatron's shard of it.
formats::NpyArray dump_array(const dist::ShardTensor<double>& t, const std::vector<Eigen::Index>& whole_shape,
                            const ProcessGroups& groups, int rank) {
  const std::vector<std::int64_t> whole(whole_shape.begin(), whole_shape.end());
  const compare::ParameterShard shard = compare::parameter_shard(golden::tensor_file_stem(t.name), groups, rank);
  const std::vector<std::int64_t> shape = compare::shard_shape(whole, shard);
  std::vector<double> values(t.data, t.data + t.size);
  std::int64_t whole_size = 1;
  for (auto n : whole) whole_size *= n;
  if (t.size == whole_size && shape != whole) values = compare::take_shard(values, whole, shard);
  return formats::NpyArray::of_reals(shape, std::move(values));
}

// Moments of every trained tensor (state.m or state.v, in trained_tensors order) as `params`' tensors, whole.
ModelParams<double> moments_as_params(const ModelConfig& m, ModelParams<double> like,
                                      const std::vector<std::vector<double>>& moments) {
  const auto views = trained_tensors(m, like);
  for (size_t i = 0; i < views.size(); ++i) std::copy(moments.at(i).begin(), moments.at(i).end(), views[i].data);
  return like;
}

// The whole moments of `state` as one rank's optimizer holds them: the shard's tensors, as shard_model cuts them.
dist::ShardMoments shard_moments(const ModelConfig& m, const ModelParams<double>& like, const AdamState& state,
                                 const ProcessGroups& groups, int rank) {
  dist::ShardMoments out;
  out.step = state.step;
  for (const auto* moments : {&state.m, &state.v}) {
    dist::ModelShard<double> shard = dist::shard_model(m, moments_as_params(m, like, *moments), groups, rank);
    auto& into = moments == &state.m ? out.m : out.v;
    for (const auto& t : dist::shard_tensors(shard, 0)) into.emplace_back(t.data, t.data + t.size);
  }
  return out;
}

// The parallel system's step on `layout`, every rank's synchronised gradients, its optimizer's step (the grad norm
// it reports, the parameters and expert biases after) written as compare/step_dump.hpp says. With steps_before 1
// the step is the second: it starts from the oracle's first step (its parameters and Adam moments, in inputs/), as a
// run resumed from a checkpoint does.
void write_step_dump(const ParallelLayout& layout, bool distributed_optimizer, StepControl control,
                     const fs::path& dir, int steps_before) {
  const ModelConfig m = step_model();
  ModelParams<double> params = random_model_params<double>(m, 71);
  const GlobalBatch batch = random_global_batch(m, kSeq, kBatch, 72, {0, 3, 0, 1, 0, 0, 2, 0});
  AdamState before;  // the moments the step starts from (empty: zero, a first step)
  if (steps_before > 0) {
    TrajectoryPoint first = reference_trajectory(m, params, {batch}, layout, kMicroBatch, LossMode::sum,
                                                 step_optimizer())
                                .front();
    params = std::move(first.params);
    before = std::move(first.adam);
  }
  write_inputs(m, params, batch, dir / "inputs");
  if (steps_before > 0)
    for (const auto& [prefix, moments] : {std::pair{"exp_avg.", &before.m}, std::pair{"exp_avg_sq.", &before.v}}) {
      ModelParams<double> as_params = moments_as_params(m, params, *moments);
      for (const auto& v : trained_tensors(m, as_params))
        formats::write_npy(dir / "inputs" / (prefix + golden::tensor_file_stem(v.name) + ".npy"),
                          real_array(v.shape, v.data, v.size));
    }
  ModelParams<double> shapes = params;  // the whole shapes of the gradients, by name
  std::map<std::string, std::vector<Eigen::Index>> shape_of;
  for (const auto& v : trained_tensors(m, shapes)) shape_of[v.name] = v.shape;

  const ProcessGroups groups(layout);
  std::vector<double> norms(static_cast<size_t>(layout.world));
  std::vector<nlohmann::json> ranges(static_cast<size_t>(layout.world), nlohmann::json::object());
  InprocWorld(layout.world).run([&](Communicator& comm) {
    const int rank = comm.rank();
    const dist::RankGroups comms(comm, groups);
    const dist::ModelShard<double> shard = dist::shard_model(m, params, groups, rank);
    dist::StepOptions options;
    options.micro_batch = kMicroBatch;
    dist::RankStep step = dist::train_step(m, shard, batch, groups, comms, options);
    // The optimizer synchronises the raw gradients itself, as a training run's does.
    options.synchronise = false;
    dist::RankStep raw = dist::train_step(m, shard, batch, groups, comms, options);
    dist::ModelShard<double> after = shard;
    dist::RankOptimizer optimizer(m, {step_optimizer(), distributed_optimizer}, groups, comms, after, LossMode::sum);
    if (steps_before > 0) optimizer.set_moments(shard_moments(m, params, before, groups, rank));
    optimizer.step(raw.grads, raw.global_tokens);
    const dist::ShardMoments moments = optimizer.moments();  // whole tensors of this rank's shard (collective)
    norms[static_cast<size_t>(rank)] = optimizer.last_grad_norm() * (control == StepControl::grad_norm_off && rank == 1
                                                                         ? 1.01 : 1.0);

    const fs::path out = dir / ("rank" + std::to_string(rank));
    fs::create_directories(out);
    const int first_expert = groups.experts_of(rank, m.layer.num_experts).first;
    bool left_out = false;
    size_t index = 0;  // into the moments, in shard_tensors order
    for (auto& t : dist::shard_tensors(step.grads, first_expert)) {
      // Adam's moments of this tensor, held as its gradient is (the shard, or the range of it below).
      std::vector<double> m_values = moments.m.at(index), v_values = moments.v.at(index);
      ++index;
      dist::ShardTensor<double> first_moment = t, second_moment = t;
      first_moment.data = m_values.data();
      second_moment.data = v_values.data();
      formats::NpyArray m_array = dump_array(first_moment, shape_of.at(t.name), groups, rank),
                       v_array = dump_array(second_moment, shape_of.at(t.name), groups, rank);
      const bool expert = t.name.find(".expert_fc") != std::string::npos;
      if (control == StepControl::experts_twice && expert)
        for (Eigen::Index i = 0; i < t.size; ++i) t.data[i] *= 2;
      if (control == StepControl::gradient_left_out && expert && rank == 1 && !left_out) {
        left_out = true;
        continue;
      }
      formats::NpyArray grad = dump_array(t, shape_of.at(t.name), groups, rank);
      const std::string stem = golden::tensor_file_stem(t.name);
      if (distributed_optimizer) {  // the range of it this rank's optimizer steps, as a distributed optimizer's dump
        const std::vector<int> group = groups.group(compare::optimizer_group(stem), rank);
        const auto position = static_cast<int>(std::find(group.begin(), group.end(), rank) - group.begin());
        const compare::GradRange r = compare::even_grad_range(static_cast<std::int64_t>(grad.reals.size()), position,
                                                              static_cast<int>(group.size()));
        if (control == StepControl::range_left_out && rank == 1 && stem == kLeftOutRange) continue;
        ranges[static_cast<size_t>(rank)][stem] = {r.start, r.end};
        for (formats::NpyArray* a : {&grad, &m_array, &v_array}) {
          a->reals.assign(a->reals.begin() + r.start, a->reals.begin() + r.end);
          a->shape = {r.size()};
        }
      }
      formats::write_npy(out / ("grad." + stem + ".npy"), grad);
      formats::write_npy(out / ("state.exp_avg." + stem + ".npy"), m_array);
      if (control == StepControl::moment_off && rank == 2 && t.name == kMovedParameter)
        for (double& x : v_array.reals) x *= 1.01;
      formats::write_npy(out / ("state.exp_avg_sq." + stem + ".npy"), v_array);
    }
    for (const auto& t : dist::shard_tensors(after, first_expert)) {
      formats::NpyArray a = dump_array(t, shape_of.at(t.name), groups, rank);
      if (control == StepControl::parameter_moved && rank == 2 && t.name == kMovedParameter)
        a.reals[0] += step_optimizer().adam.lr;
      formats::write_npy(out / ("param." + golden::tensor_file_stem(t.name) + ".npy"), a);
    }
    for (size_t l = 0; l < step.expert_bias_updated.size(); ++l) {
      const Vector<double>& b = step.expert_bias_updated[l];
      if (b.size()) formats::write_npy(out / ("param.layer" + std::to_string(step.layers[l]) + ".expert_bias.npy"),
                                      real_array({b.size()}, b.data(), b.size()));
    }
  });
  nlohmann::json config = formats::config_to_json(m.layer);
  config["semantics"] = m.layer.semantics.spec();
  const OptimizerConfig o = step_optimizer();
  nlohmann::ordered_json meta{
      {"format", compare::kStepDumpFormat},
      {"producer", std::string("moe-oracle's parallel system (check), ") +
                       (distributed_optimizer ? "distributed optimizer" : "DDP")},
      {"config", config},
      {"model", {{"num_layers", m.num_layers}, {"vocab", m.vocab}, {"rms_eps", m.rms_eps}}},
      {"layout", {{"world", layout.world}, {"tp", layout.tp}, {"cp", layout.cp}, {"pp", layout.pp}, {"ep", layout.ep}}},
      {"batch", {{"seq", kSeq}, {"size", kBatch}, {"micro_batch", kMicroBatch}}},
      {"loss_mode", "sum"},
      {"optimizer", {{"kind", "adam"}, {"lr", o.adam.lr}, {"beta1", o.adam.beta1}, {"beta2", o.adam.beta2},
                     {"eps", o.adam.eps}, {"weight_decay", o.adam.weight_decay}, {"clip_grad", o.clip_grad},
                     {"state", true}, {"steps_before", steps_before}}},
      {"reported", {{"grad_norm", norms}}}};
  if (distributed_optimizer) meta["grad_ranges"] = ranges;
  storage::write_file_synced(dir / compare::kStepJson, meta.dump(2));
}

RoundTrip step_round_trip(const std::string& name, const ParallelLayout& layout, bool distributed_optimizer,
                          StepControl control, const fs::path& scratch, int steps_before = 0) {
  const fs::path dir = scratch / "compare-step-round-trip";
  fs::remove_all(dir);
  write_step_dump(layout, distributed_optimizer, control, dir, steps_before);
  RoundTrip t{name, layout, false, 0, "", ""};
  switch (control) {
    case StepControl::none: break;
    case StepControl::experts_twice: t.shows = "a step's expert gradients ×2 named"; break;
    case StepControl::gradient_left_out: t.shows = "a step gradient left out refused"; break;
    case StepControl::grad_norm_off: t.shows = "a grad norm 1% high on one rank named"; break;
    case StepControl::parameter_moved: t.shows = "a parameter one learning rate off after the step named"; break;
    case StepControl::range_left_out: t.shows = "a distributed optimizer's gradient range left out refused"; break;
    case StepControl::moment_off: t.shows = "an Adam moment 1% off named"; break;
  }
  try {
    const compare::StepComparison c = compare::compare_step_dump(compare::read_step_dump(dir));
    t.tensors = static_cast<int>(c.tensors.size() + c.after.size() + c.state.size());
    switch (control) {
      case StepControl::none:
        t.pass = c.pass();
        if (!t.pass) {
          const auto* f = c.first_failure();
          t.first_failure = "step dump: " + f->stem + " rank " + std::to_string(f->first_rank) + " index " +
                            std::to_string(f->first_index) + " is " + std::to_string(f->worst) + " of its tolerance";
        }
        break;
      case StepControl::experts_twice:
        t.pass = !c.pass() && c.scales.size() == 1 && c.scales[0].cls == compare::ParameterClass::experts &&
                 std::abs(c.scales[0].scale - 2) < 1e-9;
        if (!t.pass) t.first_failure = "expert gradients ×2 in a step dump were not named as the experts' factor 2";
        break;
      case StepControl::gradient_left_out:
        t.first_failure = "a step dump missing one rank's expert gradient was compared, not refused";
        break;
      case StepControl::moment_off: {
        const auto* f = c.first_failure();
        t.pass = !c.pass() && f && f->stem == kMovedMoment && f->first_rank == 2 &&
                 std::all_of(c.tensors.begin(), c.tensors.end(), [](const auto& r) { return r.pass(); }) &&
                 std::all_of(c.after.begin(), c.after.end(), [](const auto& r) { return r.pass(); });
        if (!t.pass) t.first_failure = "Adam's second moment of the head 1% off on rank 2 was not named";
        break;
      }
      case StepControl::range_left_out:
        t.first_failure = "a step dump whose ranges leave part of a gradient to no rank was compared, not refused";
        break;
      case StepControl::parameter_moved: {
        const auto* f = c.first_failure();
        t.pass = !c.pass() && f && f->stem == kMovedParameter && f->first_rank == 2 && f->first_index == 0 &&
                 std::all_of(c.tensors.begin(), c.tensors.end(), [](const auto& r) { return r.pass(); });
        if (!t.pass) t.first_failure = "the head one learning rate off after the step on rank 2 was not named";
        break;
      }
      case StepControl::grad_norm_off:
        t.pass = !c.pass() && c.grad_norm && c.grad_norm->worst_rank == 1 &&
                 std::all_of(c.tensors.begin(), c.tensors.end(), [](const auto& r) { return r.pass(); });
        if (!t.pass) t.first_failure = "a grad norm 1% high on rank 1 of a step dump was not named";
        break;
    }
  } catch (const compare::DumpError& e) {
    t.pass = control == StepControl::gradient_left_out ||
             (control == StepControl::range_left_out &&
              std::string(e.what()).find("held by no rank") != std::string::npos);
    if (!t.pass) t.first_failure = std::string("step dump refused: ") + e.what();
  }
  fs::remove_all(dir);
  return t;
}

}  // namespace

std::vector<RoundTrip> step_round_trips(const fs::path& scratch) {
  // DDP on EP 2, on DP 2 and on CP 2 × PP 2 × EP 2; the distributed optimizer on TP 2 (sequence parallel) × EP 2,
  // whose embedding and head the dump holds as Megatron's vocabulary shards, each gradient split over its
  // data-parallel group (grad_ranges).
  const ParallelLayout ep2{.world = 4, .ep = 2}, dp2{.world = 2}, tp2_ep2{.world = 4, .tp = 2, .ep = 2},
      cp2_pp2{.world = 8, .cp = 2, .pp = 2, .ep = 2};
  const std::string step = "tiny-v4 ×2 layers, a training step and Adam's";
  return {step_round_trip(step, ep2, false, StepControl::none, scratch),
          step_round_trip(step, dp2, false, StepControl::none, scratch),
          step_round_trip(step + ", distributed optimizer", tp2_ep2, true, StepControl::none, scratch),
          step_round_trip(step, cp2_pp2, false, StepControl::none, scratch),
          step_round_trip("tiny-v4 step, expert gradients ×2 (must fail)", ep2, false, StepControl::experts_twice,
                          scratch),
          step_round_trip("tiny-v4 step, a gradient left out (must be refused)", ep2, false,
                          StepControl::gradient_left_out, scratch),
          step_round_trip("tiny-v4 step, a grad norm 1% high on one rank (must fail)", tp2_ep2, true,
                          StepControl::grad_norm_off, scratch),
          step_round_trip("tiny-v4 step, a parameter off after the step (must fail)", tp2_ep2, true,
                          StepControl::parameter_moved, scratch),
          step_round_trip("tiny-v4 step, a gradient range no rank holds (must be refused)", tp2_ep2, true,
                          StepControl::range_left_out, scratch),
          step_round_trip("tiny-v4 step, an Adam moment 1% off (must fail)", ep2, false, StepControl::moment_off,
                          scratch),
          // Adam's second step from the oracle's first, as a resumed run: DDP on EP 2, the distributed optimizer on
          // TP 2 × EP 2.
          step_round_trip(step + ", resumed: Adam's second step", ep2, false, StepControl::none, scratch, 1),
          step_round_trip(step + ", resumed, distributed optimizer", tp2_ep2, true, StepControl::none, scratch, 1)};
}

}  // namespace moe::cli
