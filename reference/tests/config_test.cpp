#include "reference/config.hpp"
#include "reference/presets.hpp"
#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace moe {
namespace {

MoeConfig base() {
  MoeConfig c;
  c.hidden = 8;
  c.num_experts = 8;
  c.topk = 2;
  c.ffn_hidden = 4;
  c.score_function = ScoreFunction::sigmoid;
  return c;
}

// Each invalid combination of docs/layer.md is an error whose message names the rule.
void expect_rule(const MoeConfig& c, const std::string& fragment) {
  test::expect_error(fragment, [&] { c.validate(); });
}

TEST(MoeConfig, BaseIsValid) { EXPECT_NO_THROW(base().validate()); }

TEST(MoeConfig, PresetsAreValid) {
  for (const auto& p : layer_presets()) EXPECT_NO_THROW(p.config.validate()) << p.name;
  EXPECT_THROW(layer_preset("no-such"), std::invalid_argument);
}

TEST(MoeConfig, RejectsInvalidCombinations) {
  auto c = base();
  c.score_function = ScoreFunction::softmax;
  c.expert_bias = true;
  expect_rule(c, "expert_bias requires score_function sigmoid");

  c = base();
  c.pre_softmax = true;
  expect_rule(c, "pre_softmax only applies");

  c = base();
  c.score_function = ScoreFunction::softmax;
  c.topk = 1;
  expect_rule(c, "use pre_softmax");

  c = base();
  c.apply_probs_on_input = true;
  expect_rule(c, "apply_probs_on_input requires topk = 1");

  c = base();
  c.expert_bias = true;
  c.hash_routing = true;
  expect_rule(c, "expert_bias is disabled on hash layers");

  c = base();
  c.num_groups = 4;
  c.group_topk = 3;
  expect_rule(c, "group_topk must divide topk");

  c = base();
  c.num_groups = 3;
  c.group_topk = 1;
  expect_rule(c, "num_groups must divide num_experts");

  c = base();
  c.aux_loss_type = AuxLossType::aux;
  expect_rule(c, "aux_loss_coeff must be > 0 exactly when");

  c = base();
  c.pad_to_capacity = true;
  expect_rule(c, "pad_to_capacity requires capacity_factor");

  c = base();
  c.shared_expert_gate = true;
  expect_rule(c, "shared_expert_gate requires a shared expert");
}

TEST(MoeConfig, ParsesNamesBothWays) {
  for (auto f : {ScoreFunction::softmax, ScoreFunction::sigmoid, ScoreFunction::sqrtsoftplus})
    EXPECT_EQ(parse_score_function(to_string(f)), f);
  for (auto t : {AuxLossType::none, AuxLossType::aux, AuxLossType::seq_aux, AuxLossType::global_aux})
    EXPECT_EQ(parse_aux_loss_type(to_string(t)), t);
  EXPECT_THROW(parse_score_function("relu"), std::invalid_argument);
}

}  // namespace
}  // namespace moe
