// Model cases (moe-golden-model/1): the strict reader (keys, layout and batch rules, the tensor set) and the
// verifier, shown able to fail: a perturbed expected value, a flipped semantics key, a perturbed input.
#include "golden/case_compare.hpp"
#include "golden/model_case.hpp"
#include "golden/model_case_oracle.hpp"
#include "reference/tests/expect_error.hpp"

#include "golden/tests/case_copy.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace moe::golden {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kCases = GOLDEN_CASES_DIR;

std::vector<fs::path> committed_model_cases() {
  std::vector<fs::path> cases;
  for (const auto& entry : fs::directory_iterator(kCases)) {
    const json root = json::parse(std::ifstream(entry.path() / "case.json"));
    if (root.at("format") == kModelCaseFormat) cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

// The tensors of `c` outside its tolerance when the oracle runs on it.
std::vector<std::string> failing(const ModelCase& c) {
  std::vector<std::string> names;
  for (const auto& s : model_output_specs(c.header)) names.push_back(s.stem);
  std::vector<std::string> out;
  for (const auto& t : compare_tensors(names, c.tensors, model_oracle_outputs(c.header, model_oracle_inputs(c)),
                                       c.header.tolerance))
    if (!t.pass()) out.push_back(t.name);
  return out;
}

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A private copy of a committed case to corrupt, removed when the test ends.
struct CaseCopy : test::CaseCopy {
  CaseCopy(const fs::path& from, const std::string& tag) : test::CaseCopy(from, "model_case_test", tag) {}

  json root() const { return json::parse(std::ifstream(path / "case.json")); }
  void write(const json& root) const { std::ofstream(path / "case.json") << root.dump(2); }
};

const fs::path kCp2 = kCases / "cp2_uneven_padding_megatron";

TEST(ModelCase, FileStemsOfTrainedTensors) {
  EXPECT_EQ(tensor_file_stem("layer0.expert_fc1[3]"), "layer0.expert_fc1.3");
  EXPECT_EQ(tensor_file_stem("embedding"), "embedding");
}

TEST(ModelCase, CommittedCasesHoldTheirFixedTensorSet) {
  const auto cases = committed_model_cases();
  ASSERT_GE(cases.size(), 14u);
  for (const auto& dir : cases) {
    const ModelCase c = read_model_case(dir);
    EXPECT_EQ(c.tensors.size(), model_input_specs(c.header).size() + model_output_specs(c.header).size()) << dir;
    EXPECT_LE(c.header.model.layer.hidden, 8) << dir;
    EXPECT_LE(c.header.model.vocab, 16) << dir;
  }
}

// Each committed case passes; one expected value moved by 1e-6 relative fails exactly that tensor.
TEST(ModelCase, PerturbedExpectedValueFailsVerification) {
  for (const auto& dir : committed_model_cases()) {
    ModelCase c = read_model_case(dir);
    EXPECT_TRUE(failing(c).empty()) << dir;
    c.tensors.at("objective").reals[0] *= 1.0 + 1e-6;
    c.tensors.at("grad.head").reals[3] += 1e-6 * (1.0 + std::abs(c.tensors.at("grad.head").reals[3]));
    EXPECT_EQ(failing(c), (std::vector<std::string>{"objective", "grad.head"})) << dir;
  }
}

// Every committed case depends on its "semantics": intended cases fail under megatron-core-0.19, Megatron cases fail
// under intended (the generator picks inputs where each pinned deviation moves the numbers).
TEST(ModelCase, FlippedSemanticsFailsVerification) {
  for (const auto& dir : committed_model_cases()) {
    ModelCase c = read_model_case(dir);
    const bool intended = c.header.model.layer.semantics.intended();
    c.header.model.layer.semantics = intended ? Semantics::profile("megatron-core-0.19") : Semantics();
    EXPECT_FALSE(failing(c).empty()) << dir;
  }
}

// An input moved: the embedding row of a token the batch uses changes every downstream number.
TEST(ModelCase, PerturbedInputFailsVerification) {
  ModelCase c = read_model_case(kCp2);
  const auto id = c.tensors.at("input_ids").integers[0];
  c.tensors.at("embedding").reals[static_cast<size_t>(id * c.header.model.layer.hidden)] += 1e-3;
  const auto names = failing(c);
  EXPECT_TRUE(contains(names, "objective") && contains(names, "grad.head"));
}

TEST(ModelCase, HeaderIsStrict) {
  const CaseCopy copy(kCp2, "strict");
  json root = copy.root();
  root["layout"]["pp"] = 2;
  copy.write(root);
  test::expect_error<CaseFormatError>("layout: unknown key 'pp'", [&] { read_model_case(copy.path); });
  root = copy.root();
  root["layout"].erase("pp");
  root["loss_mode"] = "mean";
  copy.write(root);
  test::expect_error<CaseFormatError>("unknown loss mode 'mean'", [&] { read_model_case(copy.path); });
  root["loss_mode"] = "sum";
  root["config"]["semantics"] = "megatron-core-0.20";
  copy.write(root);
  const std::string what = test::expect_error<CaseFormatError>(
      "config: 'semantics': unknown semantics profile 'megatron-core-0.20'", [&] { read_model_case(copy.path); });
  EXPECT_EQ(what.find('\n'), std::string::npos);
  root["config"]["semantics"] = "megatron-core-0.19";
  root["format"] = "moe-golden-model/2";
  copy.write(root);
  test::expect_error<CaseFormatError>("model case format 'moe-golden-model/2' is not supported",
                                      [&] { read_model_case(copy.path); });
}

TEST(ModelCase, LayoutAndBatchRulesAreFormatErrors) {
  const CaseCopy copy(kCp2, "rules");
  json root = copy.root();
  root["layout"]["cp"] = 3;  // S = 8 does not divide by 2·cp
  copy.write(root);
  test::expect_error<CaseFormatError>("seq must divide by 2·cp", [&] { read_model_case(copy.path); });
  root["layout"]["cp"] = 2;
  root["batch"]["micro_batch"] = 3;
  copy.write(root);
  test::expect_error<CaseFormatError>("must be divisible by micro_batch·dp", [&] { read_model_case(copy.path); });
  // Before: tp·cp·dp was computed in int (65536·65536 wrapped; UBSan: signed integer overflow).
  root["batch"]["micro_batch"] = 1;
  root["layout"]["tp"] = 65536;
  root["layout"]["cp"] = 65536;
  copy.write(root);
  test::expect_error<CaseFormatError>("tp·cp·dp at most 1048576 (got 65536·65536·", [&] { read_model_case(copy.path); });
}

TEST(ModelCase, TensorSetIsFixed) {
  const CaseCopy copy(kCp2, "tensors");
  fs::remove(copy.path / "grad.layer1.expert_fc2.3.npy");
  test::expect_error<CaseFormatError>("missing tensor 'grad.layer1.expert_fc2.3'", [&] { read_model_case(copy.path); });
  formats::write_npy(copy.path / "grad.layer1.expert_fc2.3.npy",
                     formats::NpyArray::of_reals({4, 8}, std::vector<double>(32, 0.0)));
  test::expect_error<CaseFormatError>("tensor 'grad.layer1.expert_fc2.3' has shape [4, 8], expected [8, 4]",
                                      [&] { read_model_case(copy.path); });
  formats::write_npy(copy.path / "grad.layer1.expert_fc2.3.npy",
                     formats::NpyArray::of_reals({8, 4}, std::vector<double>(32, 0.0)));
  formats::write_npy(copy.path / "layer0.expert_bias.npy", formats::NpyArray::of_reals({4}, std::vector<double>(4, 0.0)));
  test::expect_error<CaseFormatError>("extra tensor 'layer0.expert_bias'", [&] { read_model_case(copy.path); });
  fs::remove(copy.path / "layer0.expert_bias.npy");
  formats::write_npy(copy.path / "loss_mask.npy", formats::NpyArray::of_integers({2, 8}, std::vector<std::int64_t>(16, 1)));
  test::expect_error<CaseFormatError>("tensor 'loss_mask' has dtype <i8, expected |b1",
                                      [&] { read_model_case(copy.path); });
}

}  // namespace
}  // namespace moe::golden
