// End-to-end tests of the semantics profiles on the command line: the catalogue (`semantics`), the attribution of
// a layout difference (`explain`), the profile's rows in `scaling`, and the main job's default set (its coverage
// and its padding).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <set>
#include <string>
#include <tuple>

#include "cli/tests/cli_run.hpp"

namespace {

using moe::test::run;
using moe::test::run_json;

TEST(CliSemantics, CatalogueListsEveryDeviationWithItsSources) {
  const auto j = run_json("semantics");
  ASSERT_GE(j["deviations"].size(), 8u);
  for (const auto& d : j["deviations"]) {
    EXPECT_NE(d["source"].get<std::string>().find(".py"), std::string::npos) << d;
    for (const char* key : {"id", "megatron", "intended", "upstream", "visible_when", "kind"})
      EXPECT_FALSE(d[key].get<std::string>().empty()) << key << " " << d;
  }
  std::set<std::string> profiles;
  for (const auto& p : j["profiles"]) profiles.insert(p["name"].get<std::string>());
  EXPECT_EQ(profiles, (std::set<std::string>{"intended", "megatron-core-0.19", "megatron-main", "hf-transformers-5.25"}));

  // A profile lists the deviations it turns on; a modifier changes the list.
  const auto megatron = run_json("semantics --profile megatron-core-0.19,-ce-per-cp-rank");
  EXPECT_EQ(megatron["semantics"], "megatron-core-0.19,-ce-per-cp-rank");
  bool saw_router = false;
  for (const auto& d : megatron["deviations"]) {
    EXPECT_TRUE(d["on"].get<bool>());
    EXPECT_NE(d["id"], "ce-per-cp-rank");
    saw_router = saw_router || d["id"] == "router-counts-padding";
  }
  EXPECT_TRUE(saw_router);
  EXPECT_TRUE(run_json("semantics --profile intended")["deviations"].empty());
  // --semantics, as the other commands spell it, says the same.
  EXPECT_EQ(run_json("semantics --semantics megatron-core-0.19,-ce-per-cp-rank"), megatron);

  const auto bad = run("semantics --profile megatron");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.output.find("known: intended, megatron-core-0.19, megatron-main, hf-transformers-5.25"), std::string::npos) << bad.output;
}

// The example: S = 4, CP 2, position 3 padded. Megatron weights position 0 by 1/2 and 1, 2 by 1/4 (each
// CP rank divides by its own valid tokens); the intended objective weights all three 1/3.
TEST(CliExplain, AttributesTheCpPaddingExampleToCePerCpRank) {
  const std::string example = "explain --seq 4 --global-batch 1 --padding 1 --layout cp=1 --layout cp=2";
  const auto j = run_json(example + " --semantics megatron-core-0.19");
  const std::vector<double> intended{1.0 / 3, 1.0 / 3, 1.0 / 3, 0.0}, megatron{0.5, 0.25, 0.25, 0.0};
  for (int p = 0; p < 4; ++p) {
    EXPECT_DOUBLE_EQ(j["ce_weights"][0][0][p].get<double>(), intended[static_cast<size_t>(p)]) << p;
    EXPECT_DOUBLE_EQ(j["ce_weights"][1][0][p].get<double>(), megatron[static_cast<size_t>(p)]) << p;
  }
  const std::string summary = j["summary"];
  EXPECT_NE(summary.find("loss differs by"), std::string::npos) << summary;
  EXPECT_NE(summary.find("100.0% from ce-per-cp-rank"), std::string::npos) << summary;
  const auto& objective = j["attribution"][0];
  EXPECT_NEAR(objective["deviations"]["ce-per-cp-rank"].get<double>(), 1.0, 1e-9);
  EXPECT_NEAR(objective["difference"].get<double>(),
              j["objective"][1].get<double>() - j["objective"][0].get<double>(), 1e-15);

  // Under the intended objective CP changes nothing.
  const auto i = run_json(example);
  EXPECT_EQ(i["summary"], "the loss is the same for both layouts");
  EXPECT_DOUBLE_EQ(i["ce_weights"][1][0][0].get<double>(), 1.0 / 3);

  // The human table names the deviation too.
  const auto human = run(example + " --semantics megatron-core-0.19");
  EXPECT_EQ(human.status, 0);
  EXPECT_NE(human.output.find("100.0% from ce-per-cp-rank"), std::string::npos) << human.output;
}

TEST(CliExplain, LayoutsAreParsedStrictly) {
  const std::string base = "explain --seq 4 --global-batch 1 --layout cp=1 --layout ";
  for (const auto& [layout, message] :
       std::vector<std::pair<std::string, std::string>>{{"ep=2.5", "not a whole number"},
                                                        {"ep=abc", "not a whole number"},
                                                        {"cp=2,cp=2", "given twice"},
                                                        {"xp=2", "unknown size 'xp'"},
                                                        {"world=3,ep=2", "world"}}) {
    const auto r = run(base + "'" + layout + "'");
    EXPECT_EQ(r.status, 2) << layout << ": " << r.output;
    EXPECT_NE(r.output.find(message), std::string::npos) << layout << ": " << r.output;
  }
  EXPECT_EQ(run(base + "'world=2 cp=2'").status, 0);  // spaces separate sizes too
  EXPECT_EQ(run("explain --layout cp=1").status, 2);   // one layout is not a comparison
}

// scaling prints the rows the loss weights evaluate, under the chosen profile.
TEST(CliScaling, SemanticsChoosesTheLossRows) {
  const std::string layout = "scaling --world 8 --tp 2 --cp 2 --ep 2 --scaling per-token";
  const auto intended = run_json(layout);
  const auto megatron = run_json(layout + " --semantics megatron-core-0.19");
  const auto row = [](const nlohmann::json& j, const std::string& term) {
    for (const auto& r : j["loss_scales"])
      if (r["term"] == term) return r;
    return nlohmann::json();
  };
  EXPECT_EQ(row(intended, "aux_loss")["token_count"], "N_mb");
  EXPECT_EQ(row(megatron, "aux_loss")["token_count"], "num_local_tokens");
  EXPECT_EQ(row(megatron, "aux_loss")["values"], "num_local_tokens · 4");
  EXPECT_EQ(row(megatron, "aux_loss")["deviations"][0], "per-token-aux-local-tokens");
  const auto mean = run_json("scaling --world 8 --tp 2 --cp 2 --ep 2 --semantics megatron-core-0.19");
  EXPECT_EQ(row(mean, "ce")["token_count"], "1/N_c");
  EXPECT_EQ(row(mean, "global_aux_loss")["formula"], "cp/m");
}

// The main job's default set runs every feature of the oracle, padding and the Megatron profiles included, and
// passes; the coverage is measured from the runs, so dropping a row that alone covers a feature fails here.
TEST(CliCheck, DefaultSetCoversEveryFeatureAndPasses) {
  const auto j = run_json("check");
  EXPECT_TRUE(j["features_not_run"].empty()) << j["features_not_run"];
  for (const char* feature : {"padding", "ce-per-cp-rank", "router-counts-padding", "capacity by position",
                              "pad to capacity", "per-token", "avg", "resume under another layout"})
    EXPECT_NE(std::find(j["features_covered"].begin(), j["features_covered"].end(), feature),
              j["features_covered"].end())
        << feature;
  std::set<std::string> semantics;
  for (const auto& r : j["runs"]) {
    EXPECT_TRUE(r["pass"].get<bool>()) << r;
    semantics.insert(r["semantics"].get<std::string>());
  }
  EXPECT_TRUE(semantics.count("intended"));
  EXPECT_TRUE(semantics.count("megatron-core-0.19"));
  // What each row ran with, as the report takes it from the problem the system and the oracle were given: the
  // semantics, loss mode and arithmetic that cli/check/check_suite.cpp declares for it, no more and no fewer (a row whose
  // deviation, loss mode or precision is lost on the way fails here, however its runs compare).
  using Ran = std::tuple<std::string, std::string, std::string, std::string>;  // row, semantics, scaling, precision
  const std::set<Ran> declared{
      {"tiny-v4 sum b1", "intended", "sum", "float64"},
      {"tiny-v4 sum b1", "megatron-core-0.19", "sum", "float64"},
      {"tiny-v4 sum b2", "megatron-core-0.19", "sum", "float64"},
      {"tiny-capacity avg b2", "intended", "avg", "float64"},
      {"tiny-capacity sum b1", "megatron-core-0.19", "sum", "float64"},
      {"tiny-capacity sum b1", "megatron-core-0.19,+fused-swiglu-ignores-clamp", "sum", "float64"},
      {"tiny-softmax per-token b2", "intended", "per-token", "float64"},
      {"tiny-softmax per-token b2", "megatron-main,-router-counts-padding", "per-token", "float64"},
      {"tiny-softmax per-token b2", "megatron-main,-router-counts-padding,-per-token-aux-group-tokens", "per-token",
       "float64"},
      {"tiny-top1 sum b2", "intended", "sum", "float64"},
      {"tiny-top1 sum b2", "megatron-main,-router-counts-padding", "sum", "float64"},
      {"tiny-v4 fp8 sum b1", "intended", "sum", "float64"},
      {"tiny-v4 sum b1 2 steps clip 0.5", "intended", "sum", "float64"},
      {"tiny-v4 sum b1 2 steps clip 0.5 resume world=4,ep=2,etp=2", "intended", "sum", "float64"},
      {"tiny-v4 sum b1 2 steps dist-opt clip 0.5 resume world=4,ep=2,etp=2", "intended", "sum", "float64"},
      {"tiny-attention sum b1 2 steps muon clip 0.5 resume world=4,cp=2,ep=4", "intended", "sum", "float64"},
      {"tiny-attention sum b2", "intended", "sum", "float64"},
      {"tiny-attention p2p per-token b1", "intended", "per-token", "float64"},
      {"tiny-mtp sum b2", "intended", "sum", "float64"},
      {"tiny-mtp D2 per-token b1", "intended", "per-token", "float64"},
      {"tiny-mtp D2 per-token b1", "megatron-core-0.19", "per-token", "float64"},
      {"tiny-v4 bf16 sum b1", "intended", "sum", "float32"},
      {"tiny-v4 bf16 clamp 1 sum b1", "intended", "sum", "float32"},
      {"tiny-v4 bf16 clamp 1 sum b1", "intended,+clamp-limit-passes-gradient", "sum", "float32"},
      {"tiny-v4 bf16 sum b1 2 steps dist-opt", "intended", "sum", "float64"},  // whole steps: in double
      {"tiny-v4 per-token b2 replicas 4", "intended", "per-token", "float64"},
      {"tiny-v4 sum b1 2 steps replicas 4", "intended", "sum", "float64"},
      {"tiny-v4 sum b2 waves 3", "intended", "sum", "float64"}};
  std::set<Ran> ran;
  for (const auto& r : j["runs"])
    ran.insert({r["row"].get<std::string>(), r["semantics"].get<std::string>(),
                r["model"]["scaling"].get<std::string>(), r["precision"].get<std::string>()});
  EXPECT_EQ(ran, declared);
  // A cell that was not measured is null, not 0.
  EXPECT_TRUE(j["runs"][0]["max_abs"]["parameters"].is_null());
}

// Replicated experts in whole steps: the trainers plan each step from the previous step's counts, so the first of
// two steps runs unreplicated and the second replicated; both must match the oracle's trajectory. Waves: only the
// AlltoAll dispatcher runs them, and every run passes.
TEST(CliCheck, ReplicasInWholeStepsAndWaves) {
  const auto replicated = run_json("check --world 4 --ep 4 --steps 2 --hot-expert-replicas 2");
  ASSERT_FALSE(replicated["runs"].empty());
  for (const auto& r : replicated["runs"]) {
    EXPECT_TRUE(r["pass"].get<bool>()) << r;
    EXPECT_GT(r["replica_slots"].get<int>(), 0) << r;
    EXPECT_EQ(r["steps"].size(), 2u) << r;
  }
  const auto waved = run_json("check --world 8 --tp 2 --ep 2 --etp 2 --expert-waves 4");
  ASSERT_EQ(waved["runs"].size(), 1u) << "the AlltoAll dispatcher only";
  EXPECT_EQ(waved["runs"][0]["dispatcher"], "alltoall");
  EXPECT_EQ(waved["runs"][0]["expert_waves"], 4);
  EXPECT_TRUE(waved["runs"][0]["pass"].get<bool>()) << waved["runs"][0];
}

// Issue 42: explain --model of a full-size model took all memory before std::bad_alloc. The memory estimate
// (reference/memory_estimate.hpp) refuses it first, exit 2, naming the estimate and the budget; the budget
// variable makes the refusal reachable with the tiny model too.
TEST(CliExplain, RefusesAModelBeyondTheMemoryBudgetBeforeAllocating) {
  const auto full = run("explain --model " MOE_SOURCE_DIR "/models/deepseek-v3.json --layout dp=1 --layout dp=2");
  EXPECT_EQ(full.status, 2) << full.output;
  EXPECT_NE(full.output.find("more than the memory budget of"), std::string::npos) << full.output;
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "100000", 1);
  const auto tiny = run("explain --layout cp=1 --layout cp=2");
  ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
  EXPECT_EQ(tiny.status, 2) << tiny.output;
  EXPECT_NE(tiny.output.find("memory budget of 100000 bytes"), std::string::npos) << tiny.output;
}

// Issue 42: the padding rule is the library's (check_padding), so --padding and Python's padded= refuse alike; a
// list longer than the batch was cut silently.
TEST(CliExplain, RefusesPaddingOutsideTheSequenceOrLongerThanTheBatch) {
  const auto outside = run("explain --seq 4 --global-batch 2 --padding 0,5 --layout cp=1 --layout cp=2");
  EXPECT_EQ(outside.status, 2) << outside.output;
  EXPECT_NE(outside.output.find("--padding: global step: padded[1] = 5 is outside [0, seq = 4]"), std::string::npos)
      << outside.output;
  const auto longer = run("explain --seq 4 --global-batch 2 --padding 0,1,2 --layout cp=1 --layout cp=2");
  EXPECT_EQ(longer.status, 2) << longer.output;
  EXPECT_NE(longer.output.find("--padding: 3 items for a batch of 2 sequences"), std::string::npos) << longer.output;
}

}  // namespace
