// `moe-oracle volume`: communication and memory accounting of one MoE layer for a preset, layout and microbatch
// (reference/ep_volume.hpp), with the assumptions it rests on.
#include "cli/cli_checks.hpp"
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/text_format.hpp"
#include "reference/ep_volume.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace moe::cli {
namespace {

struct VolumeOptions {
  ParallelLayout layout;
  ModelOptions model;
  std::optional<int> seq;          // default: the preset's
  std::optional<int> micro_batch;  // default: the preset's
  std::optional<int> moe_layers_per_stage;
  int replica_slots = 0;  // --hot-expert-replicas
  bool json = false;
};

// Replicated hot experts (distributed/train/expert_replication.hpp), per replica slot, per MoE layer and
// microbatch: a copy of one expert's weights to the replica (bf16) and its wgrad back (fp32, Megatron's main
// grads), both held there meanwhile; and the rows of the replica's part, which this system forwards from the owner
// after the dispatch (rows and outputs in the forward, output and input gradients in the backward: four moves).
// HybridEP's dispatch sends those rows to the replica directly instead, so it has no such second hop. The part
// is half the expected rows of an expert (one copy besides the owner).
struct ReplicaVolume {
  double weight_bytes = 0, wgrad_bytes = 0, buffer_bytes = 0, part_rows = 0, forwarded_bytes = 0;
};

ReplicaVolume replica_volume(const EpVolume& v) {
  ReplicaVolume r;
  r.weight_bytes = static_cast<double>(v.params_per_expert) * 2;
  r.wgrad_bytes = static_cast<double>(v.params_per_expert) * 4;
  r.buffer_bytes = r.weight_bytes + r.wgrad_bytes;
  r.part_rows = v.expected_rows_per_expert / 2;
  r.forwarded_bytes = 4 * r.part_rows * v.width * v.bytes_per_element;
  return r;
}

// GTP weight rematerialisation of the routed experts (EGTP, R_e = egtp; seed 000 "GTP 与 EGTP"), per MoE layer and
// microbatch: a rank keeps 1/R_e of its ETP slice of its experts for good; the forward and the backward each
// all-gather the rest from the expt_gtp peers (bf16), and the backward's whole temporary wgrad is reduce-scattered
// back to the permanent shard (fp32, Megatron's main grads). While the layer runs, the gathered weights and the
// temporary wgrad are held besides the shard. These move weights, not tokens: they are not the dispatcher's ETP
// all-gather and are counted apart from it. Dense GTP (R = gtp) shards attention and the shared expert, which this
// routed-expert accounting leaves out.
struct GtpVolume {
  double permanent_bytes = 0, permanent_stage_bytes = 0, gathered_bytes_per_pass = 0, wgrad_scattered_bytes = 0,
         temporary_bytes = 0;
};

GtpVolume gtp_volume(const EpVolume& v, int egtp) {
  GtpVolume g;
  const double weights = static_cast<double>(v.weight_bytes_per_layer);  // this rank's ETP slice, bf16
  const double others = double(egtp - 1) / egtp;
  g.permanent_bytes = weights / egtp;
  g.permanent_stage_bytes = static_cast<double>(v.weight_bytes_per_stage) / egtp;
  g.gathered_bytes_per_pass = weights * others;
  g.wgrad_scattered_bytes = 2 * weights * others;  // fp32
  g.temporary_bytes = weights + 2 * weights;       // whole weights and whole fp32 wgrad
  return g;
}

void run(const VolumeOptions& a) {
  if (a.replica_slots > 0 && (a.layout.gtp > 1 || a.layout.egtp > 1))
    throw std::invalid_argument("--hot-expert-replicas is not accounted with GTP (a replica would need the gathered "
                                "weights): drop --gtp and --egtp, or the replicas");
  const LayerPreset preset = a.model.resolve();
  const int seq = a.seq.value_or(preset.seq);
  const int micro_batch = a.micro_batch.value_or(preset.batch);
  if (a.replica_slots > 0 && a.layout.etp > 1)
    throw std::invalid_argument("--hot-expert-replicas needs ETP 1 (as HybridEP's virtual experts): give --etp 1");
  const auto v = ep_volume(preset, a.layout, seq, micro_batch, a.moe_layers_per_stage);
  const ReplicaVolume rv = replica_volume(v);
  const double slots = a.replica_slots;
  const GtpVolume gv = gtp_volume(v, a.layout.egtp);

  if (a.json) {
    nlohmann::json out = {
        {"moe_oracle", MOE_ORACLE_VERSION},
        {"model", a.model.source()},
        {"notes", a.model.notes()},
        {"layout", layout_json(a.layout)},
        {"seq", seq},
        {"micro_batch", micro_batch},
        {"hidden", v.width},
        {"ffn_hidden", v.ffn_hidden},
        {"num_experts", v.num_experts},
        {"topk", v.topk},
        {"local_experts", v.local_experts},
        {"moe_layers_per_stage", v.moe_layers_per_stage},
        {"bytes_per_element", v.bytes_per_element},
        {"rows_per_rank", v.rows_per_rank},
        {"unique_tokens_per_ep_group", v.unique_tokens_per_ep_group},
        {"assignments_per_ep_group", v.assignments_per_ep_group},
        {"expected_rows_per_expert", v.expected_rows_per_expert},
        {"expected_rows_per_rank", v.expected_rows_per_rank},
        {"dispatch_bytes", v.dispatch_bytes},
        {"remote_dispatch_bytes", v.remote_dispatch_bytes},
        {"forward_bytes", v.forward_bytes},
        {"forward_backward_bytes", v.forward_backward_bytes},
        {"params_per_expert", v.params_per_expert},
        {"weight_bytes_per_layer", v.weight_bytes_per_layer},
        {"weight_bytes_per_stage", v.weight_bytes_per_stage},
        {"allgather_rows", v.allgather_rows},
        {"allgather_bytes", v.allgather_bytes},
        {"alltoall_rows", v.alltoall_rows},
        {"alltoall_bytes", v.alltoall_bytes},
        {"balance_flops_per_byte", v.balance_flops_per_byte},
        {"assumptions", v.assumptions}};
    if (a.replica_slots > 0)
      out["replicated_experts"] = {{"slots", a.replica_slots},
                                   {"weight_bytes_per_slot", rv.weight_bytes},
                                   {"wgrad_bytes_per_slot", rv.wgrad_bytes},
                                   {"replica_buffer_bytes_per_slot", rv.buffer_bytes},
                                   {"part_rows_per_slot", rv.part_rows},
                                   {"forwarded_row_bytes_per_slot", rv.forwarded_bytes},
                                   {"total_bytes", slots * (rv.weight_bytes + rv.wgrad_bytes + rv.forwarded_bytes)}};
    if (a.layout.gtp > 1 || a.layout.egtp > 1)
      out["weight_rematerialisation"] = {{"egtp", a.layout.egtp},
                                         {"permanent_shard_bytes", gv.permanent_bytes},
                                         {"permanent_stage_bytes", gv.permanent_stage_bytes},
                                         {"allgather_bytes_per_pass", gv.gathered_bytes_per_pass},
                                         {"allgather_bytes", 2 * gv.gathered_bytes_per_pass},
                                         {"wgrad_reduce_scatter_bytes", gv.wgrad_scattered_bytes},
                                         {"temporary_bytes", gv.temporary_bytes}};
    std::cout << out.dump(2) << "\n";
    return;
  }

  for (const auto& note : a.model.notes()) std::cout << "note: " << note << "\n";
  std::cout << "model " << a.model.source() << ": h " << v.width << ", E " << v.num_experts << ", k " << v.topk << ", d "
            << v.ffn_hidden << "\n";
  std::cout << "layout: " << describe(a.layout) << "\n";
  std::cout << "microbatch: " << micro_batch << " × " << seq << " tokens; per MoE layer, per rank unless stated\n";
  std::cout << "assumptions:\n";
  for (const auto& s : v.assumptions) std::cout << "  - " << s << "\n";
  std::cout << "\n";

  TextTable t({"quantity", "formula", "value"});
  t.add_row({"rows per rank", "n = b·S/(tp·cp)", with_commas(v.rows_per_rank)});
  t.add_row({"unique tokens per EP group", "ep·n", with_commas(v.unique_tokens_per_ep_group)});
  t.add_row({"assignments per EP group", "ep·n·k", with_commas(v.assignments_per_ep_group)});
  t.add_row({"expected rows per expert", "etp·ep·n·k/E", count(v.expected_rows_per_expert)});
  t.add_row({"expected rows per rank", "L·rows per expert, L = E/ep = " + std::to_string(v.local_experts),
             count(v.expected_rows_per_rank)});
  t.add_row({"dispatch payload (send, incl. local)", "n·k·h·2 B", mib(static_cast<double>(v.dispatch_bytes))});
  t.add_row({"remote dispatch", "× (ep−1)/ep", mib(v.remote_dispatch_bytes)});
  t.add_row({"forward EP volume", "dispatch + combine", mib(v.forward_bytes)});
  t.add_row({"forward + backward EP volume", "four EP exchanges", mib(v.forward_backward_bytes)});
  t.add_row({"routed-expert weights per layer", "L·3·h·d/etp·2 B", mib(static_cast<double>(v.weight_bytes_per_layer))});
  t.add_row({"routed-expert weights per stage", std::to_string(v.moe_layers_per_stage) + " MoE layers",
             mib(static_cast<double>(v.weight_bytes_per_stage))});
  t.add_row({"AllGather receive buffer", "[etp·ep·n, h] = [" + with_commas(v.allgather_rows) + ", " +
                                             std::to_string(v.width) + "]",
             mib(static_cast<double>(v.allgather_bytes))});
  t.add_row({"AlltoAll receive buffer (expected)", "[k·n, h] = [" + count(v.alltoall_rows) + ", " +
                                                       std::to_string(v.width) + "]",
             mib(v.alltoall_bytes)});
  t.add_row({"balance point", "6hd FLOPs / (h FP8 + 2h BF16) B = 2d", trimmed(v.balance_flops_per_byte) + " FLOPs/Byte"});
  if (a.replica_slots > 0) {
    const std::string per = " per slot × " + std::to_string(a.replica_slots);
    t.add_row({"replica weights sent", "3·h·d·2 B" + per, mib(slots * rv.weight_bytes)});
    t.add_row({"replica wgrad returned", "3·h·d·4 B (fp32)" + per, mib(slots * rv.wgrad_bytes)});
    t.add_row({"replica temporary buffers", "weights + wgrad" + per, mib(slots * rv.buffer_bytes)});
    t.add_row({"rows forwarded owner ↔ replica", "4 · rows per expert/2 · h·2 B" + per + " (HybridEP: 0)",
               mib(slots * rv.forwarded_bytes)});
  }
  if (a.layout.gtp > 1 || a.layout.egtp > 1) {
    const std::string re = "R_e = egtp = " + std::to_string(a.layout.egtp);
    t.add_row({"expert weights kept (EGTP shard)", "L·3·h·d/(etp·R_e)·2 B, " + re, mib(gv.permanent_bytes)});
    t.add_row({"expert weights kept per stage", std::to_string(v.moe_layers_per_stage) + " MoE layers / R_e",
               mib(gv.permanent_stage_bytes)});
    t.add_row({"EGTP weight all-gather (fwd + bwd)", "2 · weights·(R_e−1)/R_e (moves weights, not tokens)",
               mib(2 * gv.gathered_bytes_per_pass)});
    t.add_row({"EGTP wgrad reduce-scatter", "L·3·h·d/etp·4 B·(R_e−1)/R_e (fp32)", mib(gv.wgrad_scattered_bytes)});
    t.add_row({"EGTP temporary buffers", "whole weights + whole fp32 wgrad", mib(gv.temporary_bytes)});
  }
  t.print(std::cout);
  if (a.layout.gtp > 1)
    std::cout << "dense GTP (gtp " << a.layout.gtp << ") shards attention and the shared expert: outside this "
              << "routed-expert accounting\n";
}

}  // namespace

void add_volume_command(CLI::App& app) {
  auto args = std::make_shared<VolumeOptions>();
  auto* cmd = app.add_subcommand("volume", "EP communication and routed-expert memory of one MoE layer for a preset, "
                                           "layout and microbatch (uniform routing, bf16, dropless)");
  add_layout_flags(*cmd, args->layout, true);
  args->model.default_preset = "v4-pro";
  add_model_options(*cmd, args->model);
  cmd->add_option("--seq,--seq-length", args->seq, "tokens per sample (packed sequence length); default: the model's")
      ->check(whole_at_least(1));
  cmd->add_option("--micro-batch,--micro-batch-size", args->micro_batch,
                  "samples per microbatch (b); default: the model's")
      ->check(whole_at_least(1));
  cmd->add_option("--moe-layers-per-stage", args->moe_layers_per_stage,
                  "MoE layers on a stage; default: the fullest stage of an even split of the preset's depth");
  cmd->add_option("--hot-expert-replicas", args->replica_slots,
                  "also account N replica slots of replicated hot experts per layer: the weights sent, the wgrad "
                  "returned, the replica's buffers and the rows forwarded between owner and replica (ETP 1)")
      ->check(whole_at_least(1));
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args, cmd] {
    finish_layout(*cmd, args->layout);
    run(*args);
  });
}

}  // namespace moe::cli
