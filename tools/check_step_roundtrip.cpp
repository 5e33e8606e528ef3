#include "tools/check_step_roundtrip.hpp"

#include "compare/step_dump.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/rank_groups.hpp"
#include "distributed/train/train_step.hpp"
#include "golden/case_json.hpp"
#include "golden/model_case.hpp"
#include "golden/npy.hpp"
#include "reference/presets.hpp"
#include "reference/process_groups.hpp"
#include "storage/durable_files.hpp"

#include <nlohmann/json.hpp>

namespace moe::cli {
namespace {

namespace fs = std::filesystem;

enum class StepControl { none, experts_twice, gradient_left_out };

constexpr int kSeq = 8, kBatch = 8, kMicroBatch = 1;

ModelConfig step_model() {
  ModelConfig m;
  m.layer = layer_preset("tiny-v4").config;  // sigmoid routing, expert bias and its update, shared expert
  m.num_layers = 2;
  m.vocab = 16;
  return m;
}

golden::NpyArray real_array(const std::vector<Eigen::Index>& shape, const double* data, Eigen::Index size) {
  return golden::NpyArray::of_reals(std::vector<std::int64_t>(shape.begin(), shape.end()),
                                    std::vector<double>(data, data + size));
}

// The step's inputs as compare reads them: the batch and every parameter, whole, under the golden stems.
void write_inputs(const ModelConfig& m, ModelParams<double> params, const GlobalBatch& batch, const fs::path& dir) {
  fs::create_directories(dir);
  const auto put = [&](const std::string& stem, const golden::NpyArray& a) { golden::write_npy(dir / (stem + ".npy"), a); };
  const std::vector<std::int64_t> bs{batch.size, batch.seq};
  put("input_ids", golden::NpyArray::of_integers(bs, std::vector<std::int64_t>(batch.input_ids.data(),
                                                   batch.input_ids.data() + batch.input_ids.size())));
  put("labels", golden::NpyArray::of_integers(bs, std::vector<std::int64_t>(batch.labels.data(),
                                                batch.labels.data() + batch.labels.size())));
  std::vector<std::uint8_t> mask(batch.loss_mask.data(), batch.loss_mask.data() + batch.loss_mask.size());
  put("loss_mask", golden::NpyArray::of_booleans(bs, mask));
  for (const auto& v : trained_tensors(m, params)) put(golden::tensor_file_stem(v.name), real_array(v.shape, v.data, v.size));
  for (int l = 0; l < m.num_layers; ++l)
    if (m.layer_config(l).expert_bias) {
      const Vector<double>& b = params.layers[static_cast<size_t>(l)].expert_bias;
      put("layer" + std::to_string(l) + ".expert_bias", real_array({b.size()}, b.data(), b.size()));
    }
}

// The parallel system's step on `layout`, every rank's synchronised gradients written as compare/step_dump.hpp says.
void write_step_dump(const ParallelLayout& layout, StepControl control, const fs::path& dir) {
  const ModelConfig m = step_model();
  const ModelParams<double> params = random_model_params<double>(m, 71);
  const GlobalBatch batch = random_global_batch(m, kSeq, kBatch, 72, {0, 3, 0, 1, 0, 0, 2, 0});
  write_inputs(m, params, batch, dir / "inputs");
  ModelParams<double> shapes = params;  // the whole shapes of the gradients, by name
  std::map<std::string, std::vector<Eigen::Index>> shape_of;
  for (const auto& v : trained_tensors(m, shapes)) shape_of[v.name] = v.shape;

  const ProcessGroups groups(layout);
  InprocWorld(layout.world).run([&](Communicator& comm) {
    const int rank = comm.rank();
    const dist::RankGroups comms(comm, groups);
    const dist::ModelShard<double> shard = dist::shard_model(m, params, groups, rank);
    dist::StepOptions options;
    options.micro_batch = kMicroBatch;
    dist::RankStep step = dist::train_step(m, shard, batch, groups, comms, options);
    const fs::path out = dir / ("rank" + std::to_string(rank));
    fs::create_directories(out);
    bool left_out = false;
    for (auto& t : dist::shard_tensors(step.grads, groups.experts_of(rank, m.layer.num_experts).first)) {
      const bool expert = t.name.find(".expert_fc") != std::string::npos;
      if (control == StepControl::experts_twice && expert)
        for (Eigen::Index i = 0; i < t.size; ++i) t.data[i] *= 2;
      if (control == StepControl::gradient_left_out && expert && rank == 1 && !left_out) {
        left_out = true;
        continue;
      }
      golden::write_npy(out / ("grad." + golden::tensor_file_stem(t.name) + ".npy"),
                        real_array(shape_of.at(t.name), t.data, t.size));
    }
  });
  nlohmann::json config = golden::config_to_json(m.layer);
  config["semantics"] = m.layer.semantics.spec();
  const nlohmann::ordered_json meta{
      {"format", compare::kStepDumpFormat},
      {"producer", "moe-oracle's parallel system (check)"},
      {"config", config},
      {"model", {{"num_layers", m.num_layers}, {"vocab", m.vocab}, {"rms_eps", m.rms_eps}}},
      {"layout", {{"world", layout.world}, {"ep", layout.ep}}},
      {"batch", {{"seq", kSeq}, {"size", kBatch}, {"micro_batch", kMicroBatch}}},
      {"loss_mode", "sum"}};
  storage::write_file_synced(dir / compare::kStepJson, meta.dump(2));
}

RoundTrip step_round_trip(const std::string& name, const ParallelLayout& layout, StepControl control,
                          const fs::path& scratch) {
  const fs::path dir = scratch / "compare-step-round-trip";
  fs::remove_all(dir);
  write_step_dump(layout, control, dir);
  RoundTrip t{name, layout, false, 0, ""};
  try {
    const compare::StepComparison c = compare::compare_step_dump(compare::read_step_dump(dir));
    t.tensors = static_cast<int>(c.tensors.size());
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
    }
  } catch (const compare::DumpError& e) {
    t.pass = control == StepControl::gradient_left_out;
    if (!t.pass) t.first_failure = std::string("step dump refused: ") + e.what();
  }
  fs::remove_all(dir);
  return t;
}

}  // namespace

std::vector<RoundTrip> step_round_trips(const fs::path& scratch) {
  const ParallelLayout ep2{.world = 4, .ep = 2}, dp2{.world = 2};
  return {step_round_trip("tiny-v4 ×2 layers, a training step", ep2, StepControl::none, scratch),
          step_round_trip("tiny-v4 ×2 layers, a training step", dp2, StepControl::none, scratch),
          step_round_trip("tiny-v4 step, expert gradients ×2 (must fail)", ep2, StepControl::experts_twice, scratch),
          step_round_trip("tiny-v4 step, a gradient left out (must be refused)", ep2, StepControl::gradient_left_out,
                          scratch)};
}

}  // namespace moe::cli
