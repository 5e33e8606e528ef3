#include "cli/check/check_suite.hpp"

#include <algorithm>
#include <sstream>

namespace moe::cli {
namespace {

RunOptions run_of(const std::string& preset, int micro_batch, LossMode scaling,
                  std::string_view semantics = "intended") {
  RunOptions r;
  r.source.preset = preset;
  r.micro_batch = micro_batch;
  r.scaling = scaling;
  r.semantics = Semantics::parse(semantics);
  // Uneven padding: some sequences full, one almost empty, so per-microbatch and per-rank valid counts differ.
  r.padding = "0,3,0,9,1,0,16,2";
  return r;
}

// The layouts of the first row: each line adds something the ones above it don't have.
std::vector<ParallelLayout> all_axes() {
  return {
      ParallelLayout{.world = 1},                              // the oracle's own split: one rank
      ParallelLayout{.world = 4, .ep = 4},                     // EP4
      ParallelLayout{.world = 4, .ep = 2},                     // EP2 with EDP 2
      ParallelLayout{.world = 4, .ep = 2, .etp = 2},           // EP2 × ETP2
      ParallelLayout{.world = 4, .cp = 2, .ep = 2},            // CP2
      ParallelLayout{.world = 8, .tp = 2, .ep = 4},            // TP2 + SP, TP ≠ ETP, EDP 2
      ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2},  // TP2 = ETP2, EP2, EDP 2
      ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 8},   // TP2 · CP2 · EP8: 2 experts/rank, token-poor ranks
      ParallelLayout{.world = 8, .pp = 2, .ep = 4},            // PP2 · EP4: activations and gradients between stages
      ParallelLayout{.world = 8, .pp = 4, .ep = 2},            // PP4 · EP2 · EDP 1
      ParallelLayout{.world = 4, .pp = 2, .ep = 2, .vpp = 2}}; // PP2 × 2 chunks: the interleaved schedule
}

// Capacity is per source rank, and the router's statistics per tp×cp group: these split the tokens differently.
std::vector<ParallelLayout> token_splits() {
  return {ParallelLayout{.world = 1}, ParallelLayout{.world = 4, .cp = 2, .ep = 2},
          ParallelLayout{.world = 8, .tp = 2, .ep = 4, .etp = 2}, ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4}};
}

std::string shortest(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

}  // namespace

std::vector<CheckRow> default_rows() {
  std::vector<CheckRow> rows;
  rows.push_back({"tiny-v4", run_of("tiny-v4", 1, LossMode::sum), all_axes()});
  rows.push_back({"tiny-capacity", run_of("tiny-capacity", 2, LossMode::avg), token_splits()});
  rows.push_back({"tiny-softmax", run_of("tiny-softmax", 2, LossMode::per_token), token_splits()});
  rows.push_back({"tiny-top1", run_of("tiny-top1", 2, LossMode::sum),
                  {ParallelLayout{.world = 1}, ParallelLayout{.world = 4, .tp = 2, .ep = 2},
                   ParallelLayout{.world = 8, .cp = 2, .pp = 2, .ep = 2}}});
  // Megatron's semantics: what 0.19.2 computes when trained through pretrain_gpt.py (the router sees no padding)
  // and, for a loop that passes padding_mask, the rules that then show (local z mean, the shared seq_aux T,
  // per-token aux × local tokens, read as the group's).
  const std::vector<ParallelLayout> cp_tp{ParallelLayout{.world = 4, .cp = 2, .ep = 2},
                                          ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4}};
  rows.push_back({"tiny-v4", run_of("tiny-v4", 2, LossMode::sum, "megatron-core-0.19"), cp_tp});
  rows.push_back({"tiny-capacity", run_of("tiny-capacity", 1, LossMode::sum, "megatron-core-0.19"),
                  {ParallelLayout{.world = 4, .ep = 2}, ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4}}});
  rows.push_back({"tiny-capacity", run_of("tiny-capacity", 1, LossMode::sum, "megatron-core-0.19,+fused-swiglu-ignores-clamp"),
                  {ParallelLayout{.world = 4, .ep = 2}}});
  rows.push_back({"tiny-top1", run_of("tiny-top1", 2, LossMode::sum, "megatron-main,-router-counts-padding"), cp_tp});
  // FP8 dispatch: the rows the experts see quantised at the source rank, the same bits the oracle quantises.
  RunOptions fp8 = run_of("tiny-v4", 1, LossMode::sum);
  fp8.quant = Quant::fp8_dispatch;
  rows.push_back({"tiny-v4 fp8", fp8,
                  {ParallelLayout{.world = 4, .ep = 2, .etp = 2}, ParallelLayout{.world = 8, .tp = 2, .ep = 4}}});
  rows.push_back({"tiny-softmax", run_of("tiny-softmax", 2, LossMode::per_token,
                                         "megatron-main,-router-counts-padding"),
                  cp_tp});
  // The same with the local count Megatron's code means (PR #7481 applied): each rank its own valid tokens.
  rows.push_back({"tiny-softmax", run_of("tiny-softmax", 2, LossMode::per_token,
                                         "megatron-main,-router-counts-padding,-per-token-aux-group-tokens"),
                  {cp_tp.front()}});
  // Whole training steps (Adam, bias update, distributed optimizer), saved halfway and resumed under another EP.
  // tiny-v4's gradient norm is about 0.65 in both steps, so a max norm of 0.5 clips each (factor about 0.77).
  CheckRow steps{"tiny-v4", run_of("tiny-v4", 1, LossMode::sum), {ParallelLayout{.world = 4, .ep = 4}},
                 {.steps = 2, .resume_as = "world=4,ep=2,etp=2", .distributed_optimizer = true, .clip_grad = 0.5}};
  rows.push_back(steps);
  // Clipping under DDP where a norm can count a parameter twice or miss one: tp-replicated params (SP) and expert
  // replicas (EDP 4), expert shards over EP × ETP and stages over PP.
  rows.push_back({"tiny-v4", run_of("tiny-v4", 1, LossMode::sum),
                  {ParallelLayout{.world = 8, .tp = 2, .ep = 2},
                   ParallelLayout{.world = 8, .pp = 2, .ep = 2, .etp = 2}},
                  {.steps = 2, .clip_grad = 0.5}});
  // Muon: matrices whole only at their owners (TP-sharded shared expert and attention heads, ETP-sharded experts,
  // EDP replicas), the momentum carried through a checkpoint into another layout (where the heads are cut by
  // another TP and keys and values cross a CP group), and clipping over both of Muon's groups.
  rows.push_back({"tiny-attention", run_of("tiny-attention", 1, LossMode::sum),
                  {ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2}},
                  {.steps = 2, .resume_as = "world=4,cp=2,ep=4", .clip_grad = 0.5, .optimizer = OptimizerKind::muon}});
  // Blocks with causal attention: heads over TP with SP, keys and values over CP by each of Megatron's two
  // exchanges (all_gather; the p2p ring), the load-balanced chunks at cp 2 and 4, and attention between pipeline
  // stages of an interleaved schedule.
  rows.push_back({"tiny-attention", run_of("tiny-attention", 2, LossMode::sum),
                  {ParallelLayout{.world = 1}, ParallelLayout{.world = 4, .cp = 2, .ep = 2},
                   ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4},
                   ParallelLayout{.world = 8, .tp = 2, .pp = 2, .ep = 2, .vpp = 2}}});
  rows.push_back({"tiny-attention p2p", run_of("tiny-attention", 1, LossMode::per_token),
                  {ParallelLayout{.world = 4, .cp = 4, .ep = 4}, ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4}},
                  {.cp_comm_type = dist::KvExchange::p2p}});
  // Multi-token prediction (one depth, λ 0.3): the rolled batch on every source rank's rows, the depth's block
  // with attention over CP and TP, its CE normalised by its own tokens.
  rows.push_back({"tiny-mtp", run_of("tiny-mtp", 2, LossMode::sum),
                  {ParallelLayout{.world = 1}, ParallelLayout{.world = 4, .cp = 2, .ep = 2},
                   ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4}}});
  // Two depths (D = 2): each depth's CE weighs λ/D, which at D = 1 is λ and hides a missing 1/D; the second depth
  // rolls the batch twice, so its own token count Nᵏ (per-token) differs from the first's.
  RunOptions mtp2 = run_of("tiny-mtp", 1, LossMode::per_token);
  mtp2.source.flags.mtp_num_layers = 2;
  rows.push_back({"tiny-mtp D2", mtp2, {ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 2, .etp = 2}}});
  // Megatron's per-token MTP: each CP rank weighs its depth's CE by its own N_c/Nᵏ_c (padding makes them differ),
  // for each of two depths.
  RunOptions mtp2_megatron = run_of("tiny-mtp", 1, LossMode::per_token, "megatron-core-0.19");
  mtp2_megatron.source.flags.mtp_num_layers = 2;
  rows.push_back({"tiny-mtp D2", mtp2_megatron, {ParallelLayout{.world = 4, .cp = 2, .ep = 2}}});
  // bf16 storage (float arithmetic, the bf16 tolerance): ETP's and TP's partial sums summed before they are stored,
  // and the stored residual stream between the stages of an interleaved pipeline.
  RunOptions bf16 = run_of("tiny-v4", 1, LossMode::sum);
  bf16.bf16_storage = true;
  rows.push_back({"tiny-v4 bf16", bf16,
                  {ParallelLayout{.world = 4, .ep = 2, .etp = 2}, ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 4},
                   ParallelLayout{.world = 4, .pp = 2, .ep = 2, .vpp = 2}}});
  // The clamp's gradient at exactly ±L, under both conventions (intended: none; clamp-limit-passes-gradient: torch
  // 2.11's 1). Only stored values land on the limit, and only on a limit bf16 holds: L = 1, where tiny-v4's bf16
  // pre-activations meet it (0.5 and below they do not).
  for (const char* semantics : {"intended", "intended,+clamp-limit-passes-gradient"}) {
    RunOptions at_limit = run_of("tiny-v4", 1, LossMode::sum, semantics);
    at_limit.bf16_storage = true;
    at_limit.source.flags.swiglu_clamp = 1.0;
    rows.push_back({"tiny-v4 bf16 clamp 1", at_limit, {ParallelLayout{.world = 4, .ep = 2, .etp = 2}}});
  }
  // GTP weight rematerialisation: GTP peers take distinct samples and keep 1/gtp shards (dense weights over gtp,
  // routed experts over expt_gtp), reduce-scattering the wgrad into them; the router and norms are all-reduced over
  // gtp. gtp ≠ egtp is where the expert gradients need PR #7165's egtp/gtp pre-scale, which the Megatron profiles
  // lack (gtp-factor-missing); whole steps keep the shards' optimizer state and all-gather the updated weights.
  const std::vector<ParallelLayout> gtp{ParallelLayout{.world = 8, .tp = 2, .ep = 2, .gtp = 2, .egtp = 2},
                                        ParallelLayout{.world = 8, .cp = 2, .ep = 4, .gtp = 2}};
  rows.push_back({"tiny-v4", run_of("tiny-v4", 1, LossMode::sum), gtp});
  rows.push_back({"tiny-softmax", run_of("tiny-softmax", 2, LossMode::per_token), gtp});
  rows.push_back({"tiny-v4", run_of("tiny-v4", 1, LossMode::sum, "megatron-core-0.19"), {gtp[1]}});
  rows.push_back({"tiny-v4", run_of("tiny-v4", 1, LossMode::sum),
                  {ParallelLayout{.world = 8, .ep = 2, .etp = 2, .gtp = 2, .egtp = 2}},
                  {.steps = 2, .resume_as = "world=4,ep=2,etp=2", .clip_grad = 0.5}});
  // Replicated hot experts: up to 4 replica slots per layer; replicas compute shares of hot experts' rows and return
  // outputs, input gradients and wgrad to the owners. One step planned from the batch's expert counts, and two whole
  // steps, the second planned by the trainers from the first's counts.
  CheckRow replicated{"tiny-v4", run_of("tiny-v4", 2, LossMode::per_token),
                      {ParallelLayout{.world = 4, .ep = 4}, ParallelLayout{.world = 8, .tp = 2, .ep = 4},
                       ParallelLayout{.world = 4, .cp = 2, .ep = 2}},
                      {.hot_expert_slots = 4}};
  rows.push_back(replicated);
  CheckRow replicated_steps{"tiny-v4", run_of("tiny-v4", 1, LossMode::sum), {ParallelLayout{.world = 4, .ep = 4}},
                            {.steps = 2, .hot_expert_slots = 4}};
  rows.push_back(replicated_steps);
  // Wave-scheduled EP: three waves of local experts (4 per rank on ep 4: blocks of 1, 1, 2; 8 per rank on ep 2), each
  // wave's compute on a worker thread between the next wave's dispatch and the previous one's combine. AlltoAll only
  // (the dispatcher that returns every row to its source); bitwise the unwaved run, so the tolerance is the usual one.
  CheckRow waved{"tiny-v4", run_of("tiny-v4", 2, LossMode::sum),
                 {ParallelLayout{.world = 4, .ep = 4}, ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2},
                  ParallelLayout{.world = 4, .pp = 2, .ep = 2}},
                 {.expert_waves = 3}};
  rows.push_back(waved);
  // Whole bf16 steps: each step's bf16 copy of the main parameters, the update applied to the main parameters
  // (in double: the optimizer keeps double state), sharded by the distributed optimizer.
  rows.push_back({"tiny-v4 bf16", bf16, {ParallelLayout{.world = 4, .ep = 2, .etp = 2}},
                  {.steps = 2, .distributed_optimizer = true}});
  return rows;
}

std::string row_label(const CheckRow& r) {
  std::string label = r.name + " " + std::string(to_string(r.run.scaling)) + " b" + std::to_string(r.run.micro_batch);
  if (r.steps > 0)
    label += " " + std::to_string(r.steps) + " steps" +
             (r.optimizer == OptimizerKind::adam ? "" : " " + std::string(to_string(r.optimizer))) +
             (r.distributed_optimizer ? " dist-opt" : "") +
             (r.clip_grad > 0 ? " clip " + shortest(r.clip_grad) : "") +
             (r.resume_as.empty() ? "" : " resume " + r.resume_as);
  if (r.hot_expert_slots > 0) label += " replicas " + std::to_string(r.hot_expert_slots);
  if (r.expert_waves > 1) label += " waves " + std::to_string(r.expert_waves);
  return label;
}


bool bf16_in_double(const CheckRow& r) {
  return r.run.bf16_storage && (r.steps > 0 || r.run.quant != Quant::none || r.run.model().has_attention());
}

// In double both sides round the same values and agree bitwise on one rank (sums of
// products of bf16 values are exact), so such a row keeps the double tolerance: a bf16 rounding missing on either
// side is ~1e-3 of a value, far beyond it. Not with FP8 dispatch: an e4m3 code times the tile scale amax/448 is
// often amax·2^k (codes 7·2^j) up to a last-bit error, so a pre-activation that is a bf16 tie in exact arithmetic
// rounds by the sign of that error, which each side's summation order decides — one bf16 ulp of one element (2e-7
// in the expert gradients, measured). Such a row keeps the bf16 tolerance, as float rows do.
Tolerance bf16_row_tolerance(const CheckRow& r) {
  const bool exact = bf16_in_double(r) && r.run.quant == Quant::none;
  return moe::tolerance(Compared::training_step, exact ? Precision::float64 : Precision::bfloat16);
}

}  // namespace moe::cli
