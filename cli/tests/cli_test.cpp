// End-to-end tests of the layout commands: runs the built moe-oracle binary, parses its --json output with
// nlohmann-json, and checks the seed's worked examples and the error path.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "cli/tests/cli_run.hpp"

namespace {

using moe::test::run;
using moe::test::run_json;

const std::string kSeedLayout = "--world 1024 --pp 8 --tp 1 --cp 2 --ep 64 --etp 1";

// Seed 000: D_a = 64, EDP = 2; rank 64 holds experts 0–5 like rank 0 and shares expt_dp {0, 64} with it.
TEST(CliGroups, SeedLayoutJson) {
  const auto j = run_json("groups " + kSeedLayout + " --rank 64");
  EXPECT_EQ(j["layout"]["dp"], 64);
  EXPECT_EQ(j["layout"]["edp"], 2);
  EXPECT_EQ(j["experts"]["first"], 0);
  EXPECT_EQ(j["experts"]["count"], 6);
  EXPECT_EQ(j["groups"]["expt_dp"]["ranks"], nlohmann::json({0, 64}));
  EXPECT_EQ(j["groups"]["expt_dp"]["rank_in_group"], 1);
  EXPECT_EQ(j["groups"]["dp_cp"]["ranks"].size(), 128u);
  EXPECT_EQ(run_json("groups " + kSeedLayout + " --rank 1")["experts"]["first"], 6);
}

// --grid lists the 128 ranks of the stage; in stage 0, rank r has ep rank r mod 64 (default order).
TEST(CliGroups, GridCoversTheStage) {
  const auto j = run_json("groups " + kSeedLayout + " --rank 5 --grid");
  ASSERT_EQ(j["grid"].size(), 128u);
  EXPECT_EQ(j["grid"][70]["rank"], 70);
  EXPECT_EQ(j["grid"][70]["ep"], 6);
  EXPECT_EQ(j["grid"][70]["expt_dp"], 1);
  EXPECT_EQ(j["grid"][70]["experts"]["first"], 36);
  const auto human = run("groups " + kSeedLayout + " --rank 5 --grid");
  EXPECT_EQ(human.status, 0);
  EXPECT_NE(human.output.find("expt_dp"), std::string::npos);
}

// The seed's 4-rank ETP2 × EP2: ETP groups [0,1],[2,3]; EP groups [0,2],[1,3].
TEST(CliGroups, SeedEtp2Ep2) {
  const auto j = run_json("groups --world 4 --ep 2 --etp 2 --preset tiny-v4 --rank 1");
  EXPECT_EQ(j["groups"]["expt_tp"]["ranks"], nlohmann::json({0, 1}));
  EXPECT_EQ(j["groups"]["ep"]["ranks"], nlohmann::json({1, 3}));
}

// Seed 000's GTP example (128 ranks, CP2, R = 64, so D_w = 1) with EP8, R_e = 4. The groups of rank 70 as
// Megatron-Core 0.19.2's initialize_model_parallel built them (megatron_bridge/group_checks.py runs it in CI):
// dense order tp-gtp_remat-cp-ep-dp-pp, expert order tp-cp-ep-gtp_remat-dp-pp.
TEST(CliGroups, SeedGtpLayout) {
  const std::string layout = "--world 128 --cp 2 --ep 8 --etp 1 --gtp 64 --egtp 4";
  const auto j = run_json("groups " + layout + " --rank 70");
  EXPECT_EQ(j["layout"]["dp"], 1);
  EXPECT_EQ(j["layout"]["edp"], 4);
  EXPECT_EQ(j["groups"]["gtp"]["ranks"].size(), 64u);
  EXPECT_EQ(j["groups"]["gtp"]["ranks"][0], 64);  // cp rank 1: ranks 64–127, consecutive
  EXPECT_EQ(j["groups"]["cp"]["ranks"], nlohmann::json({6, 70}));
  EXPECT_EQ(j["groups"]["ep"]["ranks"], nlohmann::json({64, 65, 66, 67, 68, 69, 70, 71}));
  EXPECT_EQ(j["groups"]["expt_gtp"]["ranks"], nlohmann::json({70, 78, 86, 94}));
  EXPECT_EQ(j["groups"]["expt_dp"]["ranks"], nlohmann::json({6, 38, 70, 102}));
  // The main job runs it: 128 in-process ranks, each a 1/64 shard of the dense weights and 1/4 of its experts.
  const auto checked = run("check " + layout + " --dispatcher flex");
  EXPECT_EQ(checked.status, 0) << checked.output;
  EXPECT_NE(checked.output.find("w128 tp1 cp2 pp1 ep8 etp1 dp1 edp4 gtp64 egtp4  flex"), std::string::npos)
      << checked.output;
  EXPECT_NE(checked.output.find("1 passed, 0 failed"), std::string::npos) << checked.output;
}

// GTP 2, EGTP 1 on 16 ranks (TP2, EP2): |dp_cp| = 4, and 8 ranks see different samples. Every class ends at 1/8;
// the Megatron profiles leave the experts at 1/4 (no egtp/gtp = 1/2 correction).
TEST(CliScaling, GtpSteps) {
  const std::string layout = "scaling --world 16 --tp 2 --ep 2 --gtp 2 --egtp 1 --scaling sum --json";
  const auto j = run_json(layout);
  EXPECT_EQ(j["num_microbatches"], 1);  // B defaults to b·dp·gtp = 8
  for (const auto& row : j["gradients"]) EXPECT_DOUBLE_EQ(row["net_factor"].get<double>(), 1.0 / 8) << row;
  for (const auto& row : j["gradients"]) {
    if (row["param_class"] == "dense") {
      EXPECT_EQ(row["gtp_step"], "reduce-scatter mean");
    } else if (row["param_class"] == "sequence_parallel") {
      EXPECT_EQ(row["gtp_step"], "all-reduce AVG");
    } else {
      EXPECT_EQ(row["gtp_group_size"], 1);
    }
  }
  for (const auto& row : run_json(layout + " --semantics megatron-core-0.19")["gradients"]) {
    if (row["param_class"] == "expert") {
      EXPECT_DOUBLE_EQ(row["net_factor"].get<double>(), 1.0 / 4);
    }
  }
  const auto human = run("scaling --world 16 --tp 2 --ep 2 --gtp 2 --egtp 1");
  EXPECT_NE(human.output.find("reduce-scatter mean over gtp (2)"), std::string::npos) << human.output;
}

// SUM 1/128; AVG: experts 2/128 then AVG over expt_dp (2); per-token: 1 and ÷ global tokens. m = 4096/64 = 64.
TEST(CliScaling, SeedFactors) {
  const auto sum = run_json("scaling " + kSeedLayout + " --scaling sum --global-batch 4096 --micro-batch 1");
  EXPECT_EQ(sum["num_microbatches"], 64);
  for (const auto& row : sum["gradients"]) EXPECT_DOUBLE_EQ(row["prescale"].get<double>(), 1.0 / 128) << row;
  EXPECT_EQ(sum["loss_scales"][0]["values"], "2/64");

  const auto avg = run_json("scaling " + kSeedLayout + " --scaling avg --global-batch 4096");
  bool saw_expert = false;
  for (const auto& row : avg["gradients"]) {
    if (row["param_class"] != "expert") continue;
    saw_expert = true;
    EXPECT_DOUBLE_EQ(row["prescale"].get<double>(), 2.0 / 128);
    EXPECT_EQ(row["reduce_op"], "AVG");
    EXPECT_EQ(row["group"], "expt_dp");
    EXPECT_EQ(row["group_size"], 2);
  }
  EXPECT_TRUE(saw_expert);

  const auto per_token = run_json("scaling " + kSeedLayout + " --scaling per-token");
  for (const auto& row : per_token["gradients"]) {
    EXPECT_DOUBLE_EQ(row["prescale"].get<double>(), 1.0);
    EXPECT_TRUE(row["divide_by_global_tokens"].get<bool>());
  }
}

// Seed 000 V4-Pro figures at a microbatch of one 8192-token packed sequence over CP2.
TEST(CliVolume, SeedFigures) {
  const double MiB = 1024.0 * 1024.0;
  const auto j = run_json("volume " + kSeedLayout + " --preset v4-pro --seq 8192 --micro-batch 1");
  EXPECT_EQ(j["rows_per_rank"], 4096);
  EXPECT_EQ(j["unique_tokens_per_ep_group"], 262144);
  EXPECT_EQ(j["assignments_per_ep_group"], 1572864);
  EXPECT_DOUBLE_EQ(j["expected_rows_per_rank"].get<double>(), 24576);
  EXPECT_DOUBLE_EQ(j["remote_dispatch_bytes"].get<double>() / MiB, 330.75);
  EXPECT_DOUBLE_EQ(j["forward_bytes"].get<double>() / MiB, 661.5);
  EXPECT_DOUBLE_EQ(j["forward_backward_bytes"].get<double>() / MiB, 1323);
  EXPECT_DOUBLE_EQ(j["weight_bytes_per_stage"].get<double>() / (1024 * MiB), 5.90625);
  EXPECT_DOUBLE_EQ(j["balance_flops_per_byte"].get<double>(), 6144);
}

// Replicated hot experts on the same layout: per slot a copy of one V4-Pro expert (3·7168·3072 parameters) out in
// bf16, 126 MiB, and its wgrad back in fp32, 252 MiB, both held by the replica (378 MiB); the replica's part is half
// an expert's 4096 expected rows, moved four times between owner and replica: 4·2048·7168·2 B = 112 MiB.
TEST(CliVolume, ReplicatedExpertsTraffic) {
  const double MiB = 1024.0 * 1024.0;
  const auto j = run_json("volume " + kSeedLayout + " --preset v4-pro --seq 8192 --micro-batch 1 --hot-expert-replicas 2");
  ASSERT_EQ(j["hidden"], 7168);
  ASSERT_EQ(j["ffn_hidden"], 3072);
  const auto& r = j["replicated_experts"];
  EXPECT_EQ(r["slots"], 2);
  EXPECT_DOUBLE_EQ(r["weight_bytes_per_slot"].get<double>() / MiB, 126);
  EXPECT_DOUBLE_EQ(r["wgrad_bytes_per_slot"].get<double>() / MiB, 252);
  EXPECT_DOUBLE_EQ(r["replica_buffer_bytes_per_slot"].get<double>() / MiB, 378);
  EXPECT_DOUBLE_EQ(r["part_rows_per_slot"].get<double>(), 2048);
  EXPECT_DOUBLE_EQ(r["forwarded_row_bytes_per_slot"].get<double>() / MiB, 112);
  EXPECT_DOUBLE_EQ(r["total_bytes"].get<double>() / MiB, 2 * (126 + 252 + 112));
  EXPECT_FALSE(run_json("volume " + kSeedLayout + " --preset v4-pro").contains("replicated_experts"));
}

// Seed 000's GTP example with EGTP: 128 ranks, CP2, R = 64, EP8, R_e = 4. V4-Pro's 384 experts leave 48 per rank,
// each 3·7168·3072 parameters = 126 MiB in bf16: 6048 MiB computed with, 1512 MiB kept (1/4); each pass gathers
// the other 3/4 (4536 MiB, forward and backward: 9072 MiB); the fp32 wgrad (12096 MiB) sends 3/4 in the
// reduce-scatter (9072 MiB); whole weights and wgrad are held meanwhile (18144 MiB).
TEST(CliVolume, EgtpWeightRematerialisation) {
  const double MiB = 1024.0 * 1024.0;
  const auto j = run_json("volume --world 128 --cp 2 --gtp 64 --ep 8 --egtp 4 --preset v4-pro --seq 8192 "
                          "--micro-batch 1");
  ASSERT_EQ(j["num_experts"], 384);
  ASSERT_EQ(j["local_experts"], 48);
  const auto& g = j["weight_rematerialisation"];
  EXPECT_DOUBLE_EQ(j["weight_bytes_per_layer"].get<double>() / MiB, 6048);
  EXPECT_DOUBLE_EQ(g["permanent_shard_bytes"].get<double>() / MiB, 1512);
  EXPECT_DOUBLE_EQ(g["permanent_stage_bytes"].get<double>(), j["weight_bytes_per_stage"].get<double>() / 4);
  EXPECT_DOUBLE_EQ(g["allgather_bytes"].get<double>() / MiB, 9072);
  EXPECT_DOUBLE_EQ(g["wgrad_reduce_scatter_bytes"].get<double>() / MiB, 9072);
  EXPECT_DOUBLE_EQ(g["temporary_bytes"].get<double>() / MiB, 18144);
  const auto text = run("volume --world 128 --cp 2 --gtp 64 --ep 8 --egtp 4 --preset v4-pro");
  EXPECT_NE(text.output.find("moves weights, not tokens"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("dense GTP (gtp 64)"), std::string::npos) << text.output;
}

TEST(CliVolume, HumanOutputStatesAssumptions) {
  const auto r = run("volume " + kSeedLayout + " --seq 8192 --micro-batch 1");
  EXPECT_EQ(r.status, 0) << r.output;
  for (const char* text : {"uniform routing", "dropless", "bf16", "330.75 MiB", "1323 MiB", "5.906 GiB", "6144"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
}

// An invalid layout is one error line naming the rule, exit status 2.
TEST(CliErrors, InvalidLayoutNamesTheRule) {
  for (const char* command : {"groups", "scaling", "volume"}) {
    const auto r = run(std::string(command) + " --world 1000 --pp 8 --cp 2 --ep 64");
    EXPECT_EQ(r.status, 2) << command;
    EXPECT_NE(r.output.find("must be divisible by tp·cp·pp"), std::string::npos) << r.output;
  }
  const auto order = run("groups --world 8 --ep 2 --order tp-cp-xp-dp-pp");
  EXPECT_EQ(order.status, 2);
  EXPECT_NE(order.output.find("token 'xp'"), std::string::npos) << order.output;
}

// --kernels: an unknown name lists the known ones; a CUDA name either runs (a GPU is visible) and passes, or says
// what is missing (no CUDA backend in the build, or no device), exit status 2.
TEST(CliErrors, KernelsNamesTheChoices) {
  const auto unknown = run("check --world 1 --kernels gpu");
  EXPECT_EQ(unknown.status, 2);
  EXPECT_NE(unknown.output.find("(cpu, cuda, cuda-batch-invariant)"), std::string::npos) << unknown.output;
  const auto cuda = run("check --world 2 --ep 2 --kernels cuda");
  if (cuda.status == 0) {
    EXPECT_NE(cuda.output.find("kernels cuda"), std::string::npos) << cuda.output;
  } else {
    EXPECT_EQ(cuda.status, 2) << cuda.output;
    const bool says_why = cuda.output.find("no CUDA backend") != std::string::npos ||
                          cuda.output.find("no CUDA device 0 (0 visible)") != std::string::npos;
    EXPECT_TRUE(says_why) << cuda.output;
  }
}

// --backend nccl: on a GPU, a layout of one rank runs on the NCCL rank and a wider one on in-process ranks, which the
// report counts; elsewhere it says what is missing (no CUDA backend, no NCCL, no GPU), exit status 2. bench has no
// NCCL ranks and says so.
TEST(CliErrors, NcclBackendRunsOnAGpuOrSaysWhatIsMissing) {
  const auto nccl = run("check --world 2 --ep 2 --backend nccl --kernels cuda --filter alltoall");
  if (nccl.status == 0) {
    EXPECT_NE(nccl.output.find("backend nccl (1 rank, one GPU each)"), std::string::npos) << nccl.output;
    EXPECT_NE(nccl.output.find("note: 1 of 1 runs need more ranks than the job has"), std::string::npos)
        << nccl.output;
  } else {
    EXPECT_EQ(nccl.status, 2) << nccl.output;
    const bool says_why = nccl.output.find("no CUDA backend") != std::string::npos ||
                          nccl.output.find("has no NCCL") != std::string::npos ||
                          nccl.output.find("has no visible CUDA device") != std::string::npos;
    EXPECT_TRUE(says_why) << nccl.output;
  }
  const auto bench = run("bench --backend nccl");
  EXPECT_EQ(bench.status, 2);
  EXPECT_NE(bench.output.find("unknown value 'nccl' (inproc, mpi)"), std::string::npos) << bench.output;
}

// The experts benchmark reports the three phases with positive rates and the named limit it was given.
TEST(CliBench, ExpertsGemmReportsEveryPhase) {
  const auto j = run_json("bench --experts-gemm --tokens 64 --topk 2 --experts 4 --hidden 32 --ffn 16 "
                          "--repetitions 1 --peak-gflops 50");
  ASSERT_EQ(j["phases"].size(), 3u) << j.dump();
  for (const auto& p : j["phases"]) EXPECT_GT(p["gflops"].get<double>(), 0.0) << p.dump();
  EXPECT_EQ(j["rows"].get<int>(), 128);
  EXPECT_EQ(j["named_peak_gflops"].get<double>(), 50.0);
  EXPECT_EQ(run("bench --experts-gemm --ffn 0").status, 2);
}

// The sweep checks every output: a clean run reports no wrong element at any size, for every dispatcher, and the
// sizes follow -b, -e, -f in whole tokens (h 16, top-2: 256 bytes a token).
TEST(CliBench, SweepChecksEveryOutput) {
  const auto j = run_json("bench --sweep -b 1K -e 16K -f 4 --world 2 --hidden 16 --topk 2 --experts 4 "
                          "--repetitions 1");
  ASSERT_EQ(j["results"].size(), 9u) << j.dump();  // 1K, 4K, 16K × three dispatchers
  std::vector<int> tokens;
  for (const auto& r : j["results"]) {
    EXPECT_EQ(r["wrong"].get<std::int64_t>(), 0) << r.dump();
    EXPECT_GT(r["busbw_gbps"].get<double>(), 0.0) << r.dump();
    EXPECT_DOUBLE_EQ(r["busbw_gbps"].get<double>(), r["algbw_gbps"].get<double>() / 2) << r.dump();
    tokens.push_back(r["tokens"].get<int>());
  }
  EXPECT_EQ(tokens, (std::vector<int>{4, 4, 4, 16, 16, 16, 64, 64, 64}));
  EXPECT_EQ(run("bench --sweep -b 1M -e 1K").status, 2);
  EXPECT_EQ(run("bench --sweep -b 1X").status, 2);
  EXPECT_EQ(run("bench --sweep -e 1e30G").status, 2);  // would overflow a byte count
  EXPECT_EQ(run("bench --sweep -b 0.5G -e 1023G --hidden 1 --topk 1 --experts 1").status, 2);  // > INT_MAX tokens
  EXPECT_EQ(run("bench --sweep --permute").status, 2);
}

// Permute and unpermute are reported on one thread and on all, each against its own copy.
TEST(CliBench, PermuteReportsBothMovementsAgainstACopy) {
  const auto j = run_json("bench --permute --tokens 64 --topk 2 --experts 4 --hidden 16 --repetitions 1");
  EXPECT_EQ(j["rows"].get<int>(), 128);
  ASSERT_GE(j["results"].size(), 2u) << j.dump();
  for (const auto& r : j["results"]) {
    EXPECT_GT(r["seconds"].get<double>(), 0.0) << r.dump();
    EXPECT_GT(r["percent_of_copy"].get<double>(), 0.0) << r.dump();
  }
}

// The oracle's own speed, on a shape small enough for a test: finite rates and a peak memory.
TEST(CliBench, OracleReportsRateAndMemory) {
  const auto j = run_json("bench --oracle --tokens 8 --experts 4 --topk 2 --hidden 32 --ffn 16");
  EXPECT_GT(j["gflops"].get<double>(), 0.0) << j.dump();
  EXPECT_GT(j["dense_gemm_gflops"].get<double>(), 0.0) << j.dump();
  EXPECT_GT(j["peak_resident_bytes"].get<double>(), 1e6) << j.dump();
  EXPECT_EQ(run("bench --oracle --backend mpi").status, 2);
}

TEST(CliHelp, EveryCommandHasHelp) {
  for (const char* command : {"groups", "scaling", "volume"}) {
    const auto r = run(std::string(command) + " --help");
    EXPECT_EQ(r.status, 0) << command;
    for (const char* flag : {"--world", "--tp", "--cp", "--pp", "--ep", "--etp", "--order", "--json"})
      EXPECT_NE(r.output.find(flag), std::string::npos) << command << " " << flag;
  }
}

// `step`: --json carries the seed's splits; --stage and --rank select; --interactive stops on q.
TEST(CliStep, JsonCarriesTheSeedSplits) {
  const auto j = run_json("step --stage input_splits");
  ASSERT_EQ(j["stages"].size(), 1u);
  EXPECT_EQ(j["stages"][0]["id"], "dispatch.input_splits");
  EXPECT_EQ(j["stages"][0]["ranks"][0]["counts"], nlohmann::json({2, 2}));
  EXPECT_EQ(j["stages"][0]["ranks"][1]["counts"], nlohmann::json({1, 3}));
  EXPECT_EQ(j["oracle"]["pass"], true);
  const auto one = run_json("step --rank 1 --stage dispatch.ep_alltoallv");
  ASSERT_EQ(one["stages"][0]["ranks"].size(), 1u);
  EXPECT_EQ(one["stages"][0]["ranks"][0]["rows"].size(), 5u);
  EXPECT_EQ(one["stages"][0]["ranks"][0]["rows"][0]["label"], "a@r0→e2");
}

TEST(CliStep, InteractiveAdvancesOnEnterAndQuitsOnQ) {
  const std::string input = testing::TempDir() + "step_input.txt";
  std::ofstream(input) << "\nq\n";
  const auto r = run("step --interactive < " + input);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("[2/20] dispatch.tokens_per_expert"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("[3/20]"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("stopped after 2 of 20 stages"), std::string::npos) << r.output;
}

TEST(CliStep, TextShowsTheWholeTrip) {
  const auto r = run("step");
  EXPECT_EQ(r.status, 0) << r.output;
  for (const char* text : {"rank 0  [2, 2] │ rank 1  [1, 3]", "rank 0  [2, 1] │ rank 1  [2, 3]", "rank 0  [3, 4]",
                           "rank 1  [5, 4]", "a@r0→e0+e2", "tid2eid", "PASS"})
    EXPECT_NE(r.output.find(text), std::string::npos) << text << "\n" << r.output;
  for (const char* d : {"allgather", "flex"}) EXPECT_EQ(run(std::string("step --dispatcher ") + d).status, 0) << d;
}

// Seed 000's routing (a→e0,e2  b→e1,e3  c→e1,e3  d→e2,e3; rank 0 holds e0, e1) in two waves of one local expert
// each: wave 0 = {e0, e2}, wave 1 = {e1, e3}. Counted by hand from that table: rank 0's experts get a (wave 0) and
// b, c (wave 1); rank 1's get a, d and b, c, d; rank 0's tokens send a's two rows in wave 0 and b's two in wave 1;
// rank 1's d→e2 in wave 0 and c→e1, c→e3, d→e3 in wave 1.
TEST(CliStep, WavesShowTheSeedRowsAndMatchBitForBit) {
  const auto j = run_json("step --stage input_splits --expert-waves 2");
  const auto& w = j["waves"];
  EXPECT_EQ(w["wave_experts"], nlohmann::json({{0, 2}, {1, 3}}));
  EXPECT_EQ(w["ranks"][0]["expert_rows"], nlohmann::json({1, 2}));
  EXPECT_EQ(w["ranks"][1]["expert_rows"], nlohmann::json({2, 3}));
  EXPECT_EQ(w["ranks"][0]["source_rows"], nlohmann::json({2, 2}));
  EXPECT_EQ(w["ranks"][1]["source_rows"], nlohmann::json({1, 3}));
  EXPECT_EQ(w["bitwise"], true);
  EXPECT_EQ(w["schedule"].size(), 8u);
  for (const auto& rank : w["ranks"])
    for (const char* pass : {"forward", "backward"})
      for (const auto& span : rank[pass]) EXPECT_EQ(span["on_worker"], span["stage"] == "compute") << span;
  const auto text = run("step --expert-waves 2");
  EXPECT_EQ(text.status, 0) << text.output;
  for (const char* s : {"wave 0: e0 e2", "dispatch wave 1   │ computing wave 0", "bit for bit"})
    EXPECT_NE(text.output.find(s), std::string::npos) << s << "\n" << text.output;
  const auto too_many = run("step --expert-waves 3");
  EXPECT_EQ(too_many.status, 2);
  EXPECT_NE(too_many.output.find("local experts per rank"), std::string::npos) << too_many.output;
  const auto flex = run("step --dispatcher flex --expert-waves 2");
  EXPECT_EQ(flex.status, 2);
  EXPECT_NE(flex.output.find("AlltoAll"), std::string::npos) << flex.output;
}

TEST(CliStep, BadSelectionsNameTheRule) {
  const auto stage = run("step --stage teleport");
  EXPECT_EQ(stage.status, 2);
  EXPECT_NE(stage.output.find("no stage 'teleport'"), std::string::npos) << stage.output;
  const auto rank = run("step --rank 5");
  EXPECT_EQ(rank.status, 2);
  EXPECT_NE(rank.output.find("not a rank"), std::string::npos) << rank.output;
  const auto layout = run("step --world 4");
  EXPECT_EQ(layout.status, 2);
  EXPECT_NE(layout.output.find("needs --preset"), std::string::npos) << layout.output;
  const auto help = run("step --help");
  for (const char* flag : {"--dispatcher", "--stage", "--rank", "--interactive", "--json", "--html", "--preset"})
    EXPECT_NE(help.output.find(flag), std::string::npos) << flag;
}

}  // namespace
