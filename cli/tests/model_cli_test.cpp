// End-to-end tests of "your own model and layout": model files (ours and Hugging Face config.json), Megatron's flag
// names, --shrink, the memory guard, defaults that fit the layout, and the output for scripts (versions, nulls for
// what was not measured, JUnit, filters, strict parsing, exit codes). Each test runs the built moe-oracle binary.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/tests/cli_run.hpp"

namespace {

using moe::test::run;
using moe::test::run_json;

const std::string kModels = std::string(MOE_SOURCE_DIR) + "/models/";

// Refused with exit status 2 and a message holding every fragment.
void expect_refused(const std::string& args, std::initializer_list<std::string> fragments) {
  const auto r = run(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  for (const auto& f : fragments) EXPECT_NE(r.output.find(f), std::string::npos) << args << "\n" << r.output;
}

TEST(CliModel, FullSizeModelsAreRefusedWithAnEstimateNotKilled) {
  expect_refused("check --preset v4-pro --world 1", {"needs about", "GiB", "--shrink"});
  expect_refused("layer --preset v4-flash --seq 1", {"needs about", "GiB"});
  expect_refused("step --preset v4-pro", {"needs about", "GiB"});
}

// One memory budget for every command: the library's MOE_ORACLE_MEMORY_BUDGET bounds layer, check and step too
// (they had their own rule, 80% of MemAvailable, and ignored it).
TEST(CliModel, OneMemoryBudgetForEveryCommand) {
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "1000", 1);
  for (const char* command : {"layer", "check --world 1", "step --preset tiny-v4"})
    expect_refused(command, {"needs about", "the memory budget"});
  ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
  EXPECT_EQ(run("layer").status, 0);
}

// Issue 55: `check --world 1024` took 8.5 GB and ran on, its estimate (1.8 GiB) counting each rank's tensors but not
// the ranks themselves. Building their groups no longer gathers every member list on every rank (8 · 1024³ bytes);
// the check takes 2.0 GB and its estimate says 2.09 GiB, so it is refused at once under a 1.5 GB budget, in one line
// with the estimate, the budget and what to do; so is `step` on 1024 ranks, whose provenance walk grows as world²
// (24 GB and killed before it was counted), and worlds that fit alone but not side by side (--jobs).
TEST(CliModel, InProcessWorldsCountTheirRanksAndRunsSideBySide) {
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "1500000000", 1);
  for (const char* command : {"check --world 1024", "step --preset tiny-v4 --world 1024 --ep 1"}) {
    const auto r = run(command, "timeout 60");
    EXPECT_EQ(r.status, 2) << command << "\n" << r.output;
    for (const char* fragment : {"needs about", "the in-process ranks themselves", "fewer ranks (--world)",
                                 "MOE_ORACLE_MEMORY_BUDGET 1500000000 bytes"})
      EXPECT_NE(r.output.find(fragment), std::string::npos) << command << ": " << fragment << "\n" << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
    if (std::string(command).starts_with("check")) {
      EXPECT_NE(r.output.find("or --backend mpi (a process per rank)"), std::string::npos) << r.output;
    }
  }
  // The default set's 8-rank layouts need at most ~27 MB each, about twice that two at a time.
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "35000000", 1);
  const auto pair = run("check --jobs 2 --filter w8", "timeout 60");
  ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
  EXPECT_EQ(pair.status, 2) << pair.output;
  EXPECT_NE(pair.output.find("checking 2 worlds side by side (--jobs 2) needs about"), std::string::npos) << pair.output;
  EXPECT_NE(pair.output.find("give a smaller --jobs"), std::string::npos) << pair.output;
}

TEST(CliModel, ShrinkChecksTheStructureOfAFullSizeModel) {
  const auto j = run_json("check --preset v3 --shrink --world 8 --tp 2 --ep 4");
  ASSERT_EQ(j["runs"].size(), 3u);
  for (const auto& r : j["runs"]) {
    EXPECT_TRUE(r["pass"].get<bool>()) << r["name"];
    const auto& c = r["model"]["config"];
    EXPECT_EQ(c["topk"], 8);  // kept: top-k, groups, score function
    EXPECT_EQ(c["num_groups"], 8);
    EXPECT_EQ(c["group_topk"], 4);
    EXPECT_EQ(c["score_function"], "sigmoid");
    EXPECT_EQ(c["hidden"], 32);  // scaled
    EXPECT_EQ(c["num_experts"], 16);
    EXPECT_EQ(r["layout"]["etp"], 2);  // ETP follows TP when not given, as in Megatron
  }
  EXPECT_NE(j["chosen"][0].get<std::string>().find("--shrink"), std::string::npos);
}

// DeepSeek-V4-Flash's own config.json checks at test size, and check says what the mapping assumed (it printed
// nothing of it before; layer and volume did).
TEST(CliModel, DeepSeekV4FlashChecksAndSaysWhatItAssumed) {
  const auto r = run("check --model " + kModels + "deepseek-v4-flash.json --shrink --world 4 --ep 4");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("model: assumed: swiglu_limit clamps the routed experts only"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no effect on the MoE layer: "), std::string::npos) << r.output;
}

TEST(CliModel, MegatronFlagNamesGiveTheSameRunAsOurs) {
  const auto ours = run_json("check --world 8 --tp 2 --ep 4 --num-experts 8 --moe-router-topk 2");
  const auto megatron = run_json(
      "check --world 8 --tensor-model-parallel-size 2 --expert-model-parallel-size 4 --num-experts 8 "
      "--moe-router-topk 2");
  ASSERT_EQ(ours["runs"].size(), megatron["runs"].size());
  for (size_t i = 0; i < ours["runs"].size(); ++i) {
    EXPECT_EQ(ours["runs"][i]["layout"], megatron["runs"][i]["layout"]);
    EXPECT_EQ(ours["runs"][i]["model"], megatron["runs"][i]["model"]);
    EXPECT_EQ(megatron["runs"][i]["layout"]["etp"], 2);
  }
  // An explicit --expert-tensor-parallel-size wins over the default.
  const auto etp1 = run_json("check --world 8 --tp 2 --ep 4 --expert-tensor-parallel-size 1 --dispatcher flex");
  EXPECT_EQ(etp1["runs"][0]["layout"]["etp"], 1);
  // Megatron's model flags reach the model.
  const auto flags = run_json(
      "check --preset tiny-softmax --world 2 --ep 2 --moe-router-load-balancing-type seq_aux_loss "
      "--moe-aux-loss-coeff 0.05 --moe-expert-capacity-factor 1.5 --moe-token-drop-policy position "
      "--moe-pad-expert-input-to-capacity --calculate-per-token-loss --moe-token-dispatcher-type allgather");
  ASSERT_EQ(flags["runs"].size(), 1u);
  const auto& c = flags["runs"][0]["model"]["config"];
  EXPECT_EQ(c["score_function"], "softmax");
  EXPECT_EQ(c["aux_loss_type"], "seq_aux");
  EXPECT_DOUBLE_EQ(c["aux_loss_coeff"].get<double>(), 0.05);
  EXPECT_DOUBLE_EQ(c["capacity_factor"].get<double>(), 1.5);
  EXPECT_EQ(c["drop_policy"], "position");
  EXPECT_TRUE(c["pad_to_capacity"].get<bool>());
  EXPECT_EQ(flags["runs"][0]["model"]["scaling"], "per-token");
  EXPECT_EQ(flags["runs"][0]["dispatcher"], "allgather");
  EXPECT_TRUE(flags["runs"][0]["pass"].get<bool>());
}

TEST(CliModel, DefaultsFitTheLayout) {
  // seq 16 does not divide into CP 3's six chunks: seq 18 is chosen and said.
  const auto j = run_json("check --world 12 --cp 3 --ep 4");
  EXPECT_EQ(j["runs"][0]["model"]["seq"], 18);
  EXPECT_TRUE(j["runs"][0]["pass"].get<bool>());
  EXPECT_NE(j["chosen"][0].get<std::string>().find("seq 18"), std::string::npos);
  // Given values are kept, and refused when they do not fit.
  expect_refused("check --world 12 --cp 3 --ep 4 --seq 16", {"seq must divide by 2·cp"});
}

TEST(CliModel, StrictLayoutSpecsAndExitCodes) {
  expect_refused("check --steps 2 --world 2 --ep 2 --resume-as world=4,ep=2.5", {"not a whole number"});
  expect_refused("check --steps 2 --world 2 --ep 2 --resume-as world=4,ep=abc", {"not a whole number"});
  expect_refused("check --steps 2 --world 2 --ep 2 --resume-as 'world=4 xp=4'", {"unknown size 'xp'"});
  expect_refused("check --bogus", {"bogus"});                 // CLI11's own parse error: 2, not 109
  expect_refused("check --world 3 --ep 2", {"ep"});           // a broken layout rule
  expect_refused("check --tp 2", {"--tp needs --world"});     // a layout flag without its layout
  expect_refused("check --filter no-such-run", {"--filter matches no run"});
  EXPECT_EQ(run("check --world 2 --ep 2 --atol 0 --rtol 0 --dispatcher flex").status, 1);  // a mismatch: 1
  EXPECT_EQ(run("check --help").output.find("8 layouts"), std::string::npos);  // it ran 10 while saying 8
  const auto version = run("--version");
  EXPECT_EQ(version.status, 0);
  EXPECT_EQ(version.output.rfind("moe-oracle ", 0), 0u) << version.output;
}

TEST(CliModel, JsonSaysWhatWasMeasuredAndCarriesTheVersion) {
  const auto j = run_json("check --steps 2 --world 2 --ep 2 --dispatcher alltoall");
  EXPECT_EQ(j["moe_oracle"].get<std::string>().find('.'), 1u);  // "0.4.0"-like
  const auto& r = j["runs"][0];
  EXPECT_TRUE(r["max_abs"]["grad dense (TP)"].is_null());  // not measured by a multi-step run
  EXPECT_TRUE(r["max_abs"]["parameters"].is_number());
  ASSERT_EQ(r["steps"].size(), 2u);  // the trajectory, step by step
  EXPECT_TRUE(r["steps"][1]["objective"].is_number());
  EXPECT_EQ(r["semantics"], "intended");
  for (const char* command : {"semantics", "scaling --world 2 --ep 2", "groups --world 2 --ep 2 --preset tiny-v4",
                              "layer", "volume --world 64 --ep 64"})
    EXPECT_FALSE(run_json(command)["moe_oracle"].get<std::string>().empty()) << command;
}

TEST(CliModel, JunitAndFilter) {
  const std::string xml = std::filesystem::temp_directory_path() / "moe-oracle-junit-test.xml";
  const auto ok = run("check --filter flex --junit " + xml);
  EXPECT_EQ(ok.status, 0) << ok.output;
  std::ifstream in(xml);
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  std::size_t cases = 0;
  for (std::size_t at = s.find("<testcase"); at != std::string::npos; at = s.find("<testcase", at + 1)) ++cases;
  EXPECT_GT(cases, 10u);
  EXPECT_NE(s.find("failures=\"0\""), std::string::npos);
  EXPECT_EQ(s.find(" allgather\""), std::string::npos) << "--filter let an allgather run through";
  // Several filters: any of them.
  const auto both = run_json("check --filter 'tiny-top1 sum b2 [intended] w1 ' --filter 'tiny-capacity avg b2 [intended] w1 '");
  EXPECT_EQ(both["runs"].size(), 6u);
  for (const auto& r : both["runs"]) EXPECT_EQ(r["tolerance"], both["tolerance"]);  // no row of its own
  // The replicated-experts row does replicate: every run's plans used slots (coverage counts only those).
  const auto replicated = run_json("check --filter replicas");
  ASSERT_FALSE(replicated["runs"].empty());
  for (const auto& r : replicated["runs"]) EXPECT_GT(r["replica_slots"].get<int>(), 0) << r["name"];
  for (const auto& r : both["runs"]) EXPECT_EQ(r["replica_slots"], 0);
  // The Muon row passes by its own (looser) muon_step tolerance; each run says which it was held to.
  const auto muon = run_json("check --filter muon");
  ASSERT_FALSE(muon["runs"].empty());
  for (const auto& r : muon["runs"]) {
    EXPECT_NE(r["tolerance"], muon["tolerance"]);
    EXPECT_GT(r["tolerance"]["rtol"].get<double>(), muon["tolerance"]["rtol"].get<double>());
  }
  // A failing run is a <failure> with its first mismatch.
  EXPECT_EQ(run("check --world 2 --ep 2 --atol 0 --rtol 0 --dispatcher flex --junit " + xml).status, 1);
  std::ifstream failed(xml);
  std::stringstream failed_text;
  failed_text << failed.rdbuf();
  EXPECT_NE(failed_text.str().find("<failure message=\"first mismatch in "), std::string::npos) << failed_text.str();
  std::filesystem::remove(xml);
}


// Hugging Face config.json files of real models (models/): volume gives their numbers at full size; check refuses
// them at full size and passes their structure with --shrink.
TEST(CliModel, HuggingFaceModelsFromTheirConfigFiles) {
  const auto qwen = run_json("volume --model " + kModels + "qwen3-30b-a3b.json --world 64 --ep 8");
  EXPECT_EQ(qwen["num_experts"], 128);
  EXPECT_EQ(qwen["topk"], 8);
  EXPECT_EQ(qwen["hidden"], 2048);
  EXPECT_EQ(qwen["ffn_hidden"], 768);
  EXPECT_EQ(qwen["local_experts"], 16);
  EXPECT_EQ(qwen["rows_per_rank"], 4096);  // b·S/(tp·cp) = 1·4096
  EXPECT_EQ(qwen["params_per_expert"], 3 * 2048 * 768);
  const auto v3 = run_json("volume --model " + kModels + "deepseek-v3.json --world 64 --ep 64");
  EXPECT_EQ(v3["num_experts"], 256);
  EXPECT_EQ(v3["topk"], 8);
  EXPECT_EQ(v3["moe_layers_per_stage"], 58);  // 61 blocks, the first 3 dense
  EXPECT_FALSE(v3["notes"].empty());          // what the mapping assumed is said
  for (const std::string model : {"qwen3-30b-a3b.json", "deepseek-v3.json"}) {
    expect_refused("check --model " + kModels + model + " --world 8 --tp 2 --ep 4", {"needs about", "--shrink"});
    const auto j = run_json("check --model " + kModels + model + " --shrink --world 8 --tp 2 --ep 4");
    ASSERT_EQ(j["runs"].size(), 3u) << model;
    for (const auto& r : j["runs"]) EXPECT_TRUE(r["pass"].get<bool>()) << model << " " << r["name"];
    EXPECT_EQ(j["runs"][0]["model"]["config"]["topk"], 8) << model;
  }
  const auto groups = run_json("groups --model " + kModels + "deepseek-v3.json --world 64 --ep 64 --rank 3");
  EXPECT_EQ(groups["experts"]["count"], 4);  // 256 / 64
  expect_refused("volume --model " + kModels + "no-such-model.json --world 8", {"no-such-model.json"});
}

// `config` prints the layer a capture writes into dump.json: V4-Flash's normal and hash layers, and the semantics'
// mapped deviation reaching the mapping (V4's shared expert is not clamped by the mapping under either).
TEST(CliModel, ConfigPrintsTheLayerAsGoldenKeys) {
  const auto v4 = run_json("config --model " + kModels + "deepseek-v4-flash.json");
  EXPECT_EQ(v4["config"]["num_experts"], 256);
  EXPECT_EQ(v4["config"]["score_function"], "sqrtsoftplus");
  EXPECT_EQ(v4["config"]["hash_routing"], false);
  EXPECT_EQ(v4["config"]["shared_expert_clamp"], false);
  EXPECT_EQ(v4["hash_layer_config"]["hash_routing"], true);
  EXPECT_EQ(v4["hash_layer_config"]["expert_bias"], false);
  EXPECT_EQ(v4["n_hash_layers"], 3);
  EXPECT_EQ(v4["semantics"], "intended");
  const auto hf = run_json("config --model " + kModels + "deepseek-v4-flash.json --semantics hf-transformers-5.25");
  EXPECT_EQ(hf["semantics"], "hf-transformers-5.25");
  EXPECT_EQ(hf["config"], v4["config"]);  // the clamp deviation is the oracle's, not the mapping's
  expect_refused("config --model " + kModels + "deepseek-v4-flash.json --semantics hf-transformers-5.24",
                 {"hf-transformers-5.25"});
}

// DeepSeek's shared expert is n_shared_experts routed experts wide: a new routed width carries it along (it kept
// the file's 2048 before), unless its own flag is given.
TEST(CliModel, RoutedWidthCarriesDeepSeeksSharedExpert) {
  const std::string v3 = "config --model " + kModels + "deepseek-v3.json --moe-ffn-hidden-size 16";
  EXPECT_EQ(run_json(v3)["config"]["shared_expert_ffn_hidden"], 16);
  EXPECT_EQ(run_json(v3 + " --moe-shared-expert-intermediate-size 24")["config"]["shared_expert_ffn_hidden"], 24);
  EXPECT_EQ(run_json("config --model " + kModels + "deepseek-v4-flash.json --moe-ffn-hidden-size 8")["config"]
                    ["shared_expert_ffn_hidden"],
            8);
}
}  // namespace
