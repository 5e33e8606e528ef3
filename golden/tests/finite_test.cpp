// Non-finite numbers in golden cases. An expected ±inf would pass every comparison (|a − inf| ≤ atol + rtol·inf
// holds for any finite a) and an expected NaN can never pass, so both make the case meaningless: a case holding one
// is refused, naming the tensor and the index. A NaN input would only show in the outputs it reaches — a NaN weight
// of an expert that receives no token reaches none — so inputs are refused too, before the oracle runs. A computed
// NaN or inf is a failure reported as it is: max_abs nan or inf, never 0.
#include "golden/case_compare.hpp"
#include "golden/case_oracle.hpp"
#include "golden/golden_case.hpp"
#include "golden/model_case.hpp"
#include "golden/model_case_oracle.hpp"
#include "reference/tests/expect_error.hpp"

#include "golden/tests/case_copy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

namespace moe::golden {
namespace {

namespace fs = std::filesystem;

const fs::path kCases = GOLDEN_CASES_DIR;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A private copy of a committed case to corrupt, removed when the test ends.
struct CaseCopy : test::CaseCopy {
  CaseCopy(const std::string& name, const std::string& tag) : test::CaseCopy(kCases / name, "finite_test", tag) {}
};

// The outputs of a case as computed (here: its own expected values).
std::map<std::string, formats::NpyArray> outputs_of(const GoldenCase& c) {
  std::map<std::string, formats::NpyArray> computed;
  for (const auto& name : output_tensor_names(c.header.config)) computed.emplace(name, c.tensors.at(name));
  return computed;
}

TEST(GoldenFinite, ExpectedInfinityOrNanIsRefusedNamingTheTensorAndIndex) {
  for (const double bad : {kInf, -kInf, kNaN}) {
    GoldenCase c = read_case(kCases / "softmax_post");
    const auto computed = outputs_of(c);
    c.tensors.at("y").reals[5] = bad;
    // Before: an inf compared as PASS, a NaN as FAIL with max_abs 0.
    const std::string what =
        test::expect_error<CaseFormatError>("expected tensor 'y'", [&] { (void)compare_outputs(c, computed); });
    if (!what.empty()) {
      EXPECT_NE(what.find("at index 5 [0, 5]"), std::string::npos) << what;
      EXPECT_NE(what.find(std::isnan(bad) ? "nan" : "inf"), std::string::npos) << what;
    }
  }
}

TEST(GoldenFinite, ComputedNanOrInfIsReportedAsItIs) {
  const GoldenCase c = read_case(kCases / "softmax_post");
  auto computed = outputs_of(c);
  computed.at("y").reals[3] = kNaN;
  computed.at("grad_x").reals[0] = -kInf;
  for (const auto& t : compare_outputs(c, computed)) {
    if (t.name == "y") {
      EXPECT_TRUE(std::isnan(t.max_abs)) << "max_abs " << t.max_abs << " hides the NaN";  // before: 0
      EXPECT_TRUE(std::isnan(t.max_rel)) << t.max_rel;
      EXPECT_EQ(t.failing, 1);
    } else if (t.name == "grad_x") {
      EXPECT_EQ(t.max_abs, kInf);
      EXPECT_EQ(t.max_rel, kInf);
      EXPECT_EQ(t.failing, 1);
    } else {
      EXPECT_TRUE(t.pass()) << t.name;
    }
  }
}

TEST(GoldenFinite, ACaseFileHoldingANonFiniteExpectedValueIsRefused) {
  const CaseCopy copy("softmax_post", "expected");
  formats::NpyArray y = formats::read_npy(copy.path / "y.npy");
  y.reals[7] = kInf;  // [0, 7] of [16, 8]
  formats::write_npy(copy.path / "y.npy", y);
  test::expect_error<CaseFormatError>("tensor 'y' has a non-finite value inf at index 7 [0, 7]",
                                      [&] { (void)read_case(copy.path); });
}

// zero_token_expert: one expert receives no token, so a NaN in its weights changes no output and verify passed.
TEST(GoldenFinite, ANanWeightOfAnExpertWithoutTokensIsRefused) {
  const GoldenCase c = read_case(kCases / "zero_token_expert");
  const auto& counts = c.tensors.at("tokens_per_expert").integers;
  const auto idle = std::find(counts.begin(), counts.end(), 0);
  ASSERT_NE(idle, counts.end()) << "the case has an expert without tokens";
  const auto per_expert = static_cast<std::size_t>(c.tensors.at("expert_fc1").size()) / counts.size();
  const auto first = static_cast<std::size_t>(idle - counts.begin()) * per_expert;

  // In memory: refused before the oracle runs.
  GoldenCase poisoned = c;
  poisoned.tensors.at("expert_fc1").reals[first + 1] = kNaN;
  test::expect_error<CaseFormatError>("tensor 'expert_fc1' has a non-finite value nan at index " +
                                          std::to_string(first + 1),
                                      [&] { (void)oracle_inputs(poisoned); });

  // On disk: refused by the reader, so `golden verify` reports the case as an error naming the tensor.
  const CaseCopy copy("zero_token_expert", "idle_expert");
  formats::write_npy(copy.path / "expert_fc1.npy", poisoned.tensors.at("expert_fc1"));
  test::expect_error<CaseFormatError>("tensor 'expert_fc1' has a non-finite value nan",
                                      [&] { (void)read_case(copy.path); });
}

TEST(GoldenFinite, WriteCaseRefusesANonFiniteTensor) {
  GoldenCase c = read_case(kCases / "softmax_post");
  c.tensors.at("router_weight").reals[2] = -kInf;
  const fs::path dir = fs::temp_directory_path() / "moe_golden_finite_test_write";
  fs::remove_all(dir);
  test::expect_error<CaseFormatError>("tensor 'router_weight' has a non-finite value -inf at index 2",
                                      [&] { write_case(dir, c); });
  EXPECT_FALSE(fs::exists(dir)) << "nothing is written";
}

TEST(GoldenFinite, ModelCasesRefuseNonFiniteInputsAndExpectations) {
  const fs::path source = kCases / "cp2_uneven_padding";
  {
    const CaseCopy copy("cp2_uneven_padding", "model_input");
    formats::NpyArray w = formats::read_npy(copy.path / "layer0.expert_fc1.3.npy");
    w.reals[0] = kNaN;
    formats::write_npy(copy.path / "layer0.expert_fc1.3.npy", w);
    test::expect_error<CaseFormatError>("tensor 'layer0.expert_fc1.3' has a non-finite value nan at index 0",
                                        [&] { (void)read_model_case(copy.path); });
  }
  {
    const CaseCopy copy("cp2_uneven_padding", "model_expected");
    formats::NpyArray g = formats::read_npy(copy.path / "grad.head.npy");
    g.reals[4] = kInf;
    formats::write_npy(copy.path / "grad.head.npy", g);
    test::expect_error<CaseFormatError>("tensor 'grad.head' has a non-finite value inf at index 4",
                                        [&] { (void)read_model_case(copy.path); });
  }
  // In memory, the inputs are checked before global_step runs, the expectations before they are compared.
  ModelCase c = read_model_case(source);
  ModelCase poisoned = c;
  poisoned.tensors.at("layer1.router_weight").reals[1] = kInf;
  test::expect_error<CaseFormatError>("tensor 'layer1.router_weight' has a non-finite value inf at index 1",
                                      [&] { (void)model_oracle_inputs(poisoned); });
  std::vector<std::string> names;
  for (const auto& s : model_output_specs(c.header)) names.push_back(s.stem);
  const auto computed = model_oracle_outputs(c.header, model_oracle_inputs(c));
  c.tensors.at("objective").reals[0] = kNaN;
  test::expect_error<CaseFormatError>("expected tensor 'objective' has a non-finite value nan at index 0",
                                      [&] { (void)compare_tensors(names, c.tensors, computed, c.header.tolerance); });
}

}  // namespace
}  // namespace moe::golden
