// A per-rank dump of one whole training step from another framework (format `moe-step/1`, compare/README.md), and
// its judgement by the oracle's global step (reference/global_step.hpp).
//
// A step dump is a golden model case's inputs plus what each rank's optimizer was handed:
//   step.json        format, producer, config (the layer keys, semantics included), model {num_layers, vocab,
//                    rms_eps}, layout {world, tp, cp, pp, ep, etp}, batch {seq, size, micro_batch}, loss_mode, and
//                    free-form notes
//   inputs/          input_ids, labels [B, S] int64, loss_mask [B, S] bool, and every parameter the step started
//                    from, whole, under the golden model case's file stems (golden/model_case.hpp)
//   rank<r>/         grad.<stem>.npy: the reduced gradient of every parameter rank r holds, as its optimizer sees it
//                    (Megatron's main_grad after finalize_model_grads, before clipping)
// and under a distributed optimizer step.json's grad_ranges: per rank {stem: [start, end]}, the flat range of its
// shard whose gradient that rank's optimizer steps; grad.<stem>.npy is then those elements, 1-D (grad_ranges.hpp)
// and, optionally, the end of the step:
//   step.json        optimizer {kind "adam", lr, beta1, beta2, eps, weight_decay, clip_grad (0: none), optional
//                    no_decay [parameter class names], state (bool), steps_before (n, default 0)}: torch's AdamW's
//                    step n + 1, from zero moments (n = 0) or from inputs/exp_avg.<stem>, exp_avg_sq.<stem>; reported {grad_norm: [one per rank], the norm each
//                    rank's optimizer reported, before clipping; lm_loss, the global batch's mean CE per valid token
//                    as Megatron's training loop logs it}
//   rank<r>/         param.<stem>.npy (with an optimizer): each parameter it holds after the step, and
//                    param.layer<l>.expert_bias.npy, the expert bias after its update, for every layer that has one;
//                    with optimizer.state true, state.exp_avg.<stem>.npy and state.exp_avg_sq.<stem>.npy: Adam's
//                    moments after the step, for every gradient it holds, shaped as that gradient
// Which rank holds what follows the layout (holds below): every rank its replica of its stage's dense parameters, the
// ranks of EP rank p the experts p·E/ep … (p+1)·E/ep − 1, each as its TP or ETP shard (parameter_shard.hpp). A rank
// missing a gradient it holds, a gradient it does not hold, a file of another shape or a non-finite value is refused
// (DumpError), so nothing passes that was not compared.
//
// Layouts of data, tensor (with sequence), context, pipeline (with virtual stages: layout.vpp), expert and
// expert-tensor parallelism are judged. It compares the gradients and, where the dump holds them, the grad norm, the
// lm loss, the parameters and Adam's moments after the step.
#pragma once

#include "compare/dump.hpp"
#include "compare/grad_ranges.hpp"
#include "golden/model_case.hpp"
#include "reference/global_step.hpp"
#include "reference/optimizer.hpp"
#include "reference/process_groups.hpp"

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moe::compare {

inline constexpr const char* kStepDumpFormat = "moe-step/1";
inline constexpr const char* kStepJson = "step.json";

// Whether `dir` holds a step dump (step.json) rather than a layer dump (dump.json).
bool is_step_dump(const std::filesystem::path& dir);

enum class ParameterClass { embedding, norms, attention, router, experts, shared_expert, mtp_projection, head };
inline constexpr ParameterClass kParameterClasses[] = {
    ParameterClass::embedding, ParameterClass::norms,         ParameterClass::attention,      ParameterClass::router,
    ParameterClass::experts,   ParameterClass::shared_expert, ParameterClass::mtp_projection, ParameterClass::head};
const char* to_string(ParameterClass c);

// The optimizer a step dump ran: Adam (torch's AdamW) from zero moments, clipping at clip_grad when > 0, its weight
// decay skipping the classes in no_decay (Megatron's default skips 1-D parameters and biases: the norms).
struct StepOptimizer {
  AdamConfig adam;
  double clip_grad = 0;
  std::vector<ParameterClass> no_decay;
  bool state = false;  // the dump holds each rank's Adam moments after the step (state.exp_avg/exp_avg_sq.<stem>)
  int steps_before = 0;  // Adam's steps before this one: > 0, the moments it started from are in inputs/
};

struct StepDump {
  std::filesystem::path dir;
  std::string producer;
  ModelConfig model;
  ParallelLayout layout;
  int vpp = 1;  // virtual pipeline stages (model chunks) a pipeline rank holds
  int seq = 0, global_batch = 0, micro_batch = 0;
  LossMode loss_mode = LossMode::sum;
  Precision precision = Precision::float64;  // the files' (float64 only), or what the user stated
  bool precision_stated = false;
  GlobalBatch batch;
  ModelParams<double> params;
  // Per rank: golden stem ("layer0.expert_fc1.3") -> the gradient that rank's optimizer was handed: its whole
  // shard, or under a distributed optimizer the flat range grad_ranges names (grad_ranges.hpp).
  std::vector<std::map<std::string, formats::NpyArray>> grads;
  std::vector<RankGradRanges> grad_ranges;  // empty: no distributed optimizer, every rank's gradients whole
  // The part of its shard of `elements` rank r's gradient (and moments) of `stem` hold: all of it, or its range.
  GradRange grad_range(int r, const std::string& stem, std::int64_t elements) const {
    return grad_ranges.empty() ? GradRange{0, elements} : grad_ranges[static_cast<size_t>(r)].at(stem);
  }
  std::optional<StepOptimizer> optimizer;  // none: the dump ends at the gradients
  std::map<std::string, formats::NpyArray> initial;  // with an optimizer: inputs/' parameters by stem, whole
  // With optimizer.steps_before > 0: Adam's moments the step started from, "exp_avg.<stem>" / "exp_avg_sq.<stem>",
  // whole (inputs/exp_avg.<stem>.npy …, as the parameters).
  std::map<std::string, formats::NpyArray> initial_moments;
  std::vector<double> reported_grad_norm;  // one per rank; empty: none reported
  std::optional<double> reported_lm_loss;   // the global batch's CE per valid token, as logged
  // Per rank, with an optimizer: stem -> that rank's shard after the step ("layer0.expert_bias" for the bias).
  std::vector<std::map<std::string, formats::NpyArray>> params_after;
  // Per rank, with an optimizer's state: "exp_avg.<stem>" / "exp_avg_sq.<stem>" -> its moments after the step, as
  // its gradient is held (the shard, or the distributed optimizer's range of it).
  std::vector<std::map<std::string, formats::NpyArray>> state;
};

struct StepReadOptions {
  std::string semantics;                 // empty: step.json's claim
  std::optional<Precision> precision;    // the arithmetic the framework computed in; none: the files' (float64)
};

StepDump read_step_dump(const std::filesystem::path& dir, const StepReadOptions& options = {});

// Which parameters a step compares, by their role in the model.
// Whether `rank` of the layout holds the parameter named by its golden stem: its pipeline stage's layers
// (num_layers / pp consecutive ones; under vpp virtual stages, chunks of num_layers / (pp·vpp) dealt to the stages in
// turn, Megatron's interleaving), the embedding on the first stage, the final norm, the head and any MTP block on the
// last; of the routed experts, its EP rank's.
bool holds(const std::string& stem, const ProcessGroups& groups, int rank, const ModelConfig& model, int vpp = 1);
ParameterClass parameter_class(const std::string& stem);

struct StepTensorResult {
  std::string stem;
  ParameterClass cls = ParameterClass::embedding;
  std::vector<int> ranks;     // the ranks holding it, each compared
  std::int64_t elements = 0;  // per rank
  double max_abs = 0;         // largest |dump − oracle| over its ranks
  double worst = 0;           // largest |dump − oracle| / (atol + rtol·|oracle|)
  double scale = 1;           // ⟨dump, oracle⟩ / ⟨oracle, oracle⟩ over its ranks' copies
  double scatter = 0;         // rms(dump − scale·oracle) / rms(oracle): how well one factor explains the dump
  int first_rank = -1;        // the first failing element's rank, index and values
  std::int64_t first_index = -1;
  double got = 0, want = 0;
  bool pass() const { return worst <= 1.0; }
};

// A factor that explains a class's mismatch: every failing tensor of the class off by the same scale on its ranks.
struct ScaleFinding {
  ParameterClass cls;
  double scale = 1;
  std::vector<int> ranks;
  int tensors = 0;
};

// A scalar the ranks reported against the oracle's: the grad norm (against the norm of its whole gradient), the lm
// loss.
struct ReportedResult {
  double want = 0;
  double allowance = 0;  // derived from the gradients' tolerance (step_update.hpp)
  std::vector<double> got;  // per rank
  int worst_rank = -1;
  double worst = 0;  // largest |got − want| / allowance
  bool pass() const { return worst <= 1.0; }
};

struct StepComparison {
  Tolerance tolerance;
  double objective = 0;
  std::vector<StepTensorResult> tensors;  // the gradients
  std::vector<ScaleFinding> scales;
  std::optional<ReportedResult> grad_norm;      // where the dump reports one
  std::optional<ReportedResult> lm_loss;        // where the dump reports one (got: the one value)
  std::vector<StepTensorResult> after;      // the parameters after the step, where the dump holds them
  std::vector<StepTensorResult> state;      // Adam's moments after the step ("exp_avg.<stem>"), where it holds them
  bool pass() const;
  const StepTensorResult* first_failure() const;
  // The gradient furthest beyond its tolerance (else the parameter after the step): where a bug that is no single
  // factor (a loss term's scale that reaches some gradients through others) shows most.
  const StepTensorResult* worst_failure() const;
};

StepComparison compare_step_dump(const StepDump& dump);

// The golden model case the oracle runs for a step dump: its model, batch split (tp, cp, dp) and loss mode.
golden::ModelCaseHeader oracle_header(const StepDump& dump);

// A difference or ratio of finite values, held finite: ±DBL_MAX where it overflowed (a value beyond any tolerance
// stays a number the report can print and compare).
inline double saturated(double v) {
  return std::isinf(v) ? std::copysign(std::numeric_limits<double>::max(), v) : v;
}

}  // namespace moe::compare
