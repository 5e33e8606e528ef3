// How a property runs: RapidCheck through GoogleTest, with a case budget per property.
//
//   MOE_PROPERTY(Suite, Name, ci_cases, (const Scenario& s)) { … RC_ASSERT(…); }
// defines the GoogleTest Suite.Name that checks the property on `ci_cases` generated cases in CI mode:
//   CI (default)   fixed seed (kCiSeed), ci_cases cases, so every run of the suite checks the same cases;
//   soak           MOE_SOAK=N (N ≥ 1): N × 25 × ci_cases cases from a fresh random seed;
//   RC_PARAMS      RapidCheck's own variable wins for what it sets (seed, max_success, reproduce=…), so the
//                  "RC_PARAMS=…" line a failure prints reproduces that failure exactly.
// A failure prints the shrunk counterexample (the Scenario's one-line form) and the reason.
#pragma once

#include <gtest/gtest.h>
#include <rapidcheck/gtest.h>

#include <cstdint>
#include <iostream>
#include <sstream>
#include <string>

namespace moe::proptest {

inline constexpr std::uint64_t kCiSeed = 20250601;

// The number of cases a property with this CI budget runs now (see above).
int case_budget(int ci_cases);

// The RapidCheck parameters for a property with this CI budget: RC_PARAMS where it says so, else the mode's.
rc::detail::TestParams test_params(int ci_cases);

template <typename Testable>
void check_property(Testable&& testable, const char* suite, const char* name, int ci_cases) {
  rc::detail::TestMetadata metadata;
  metadata.id = std::string(suite) + "/" + name;
  metadata.description = name;
  const auto result = rc::detail::checkTestable(std::forward<Testable>(testable), metadata, test_params(ci_cases));
  std::ostringstream message;
  rc::detail::printResultMessage(result, message);
  if (result.template is<rc::detail::SuccessResult>())
    std::cout << "[ property ] " << metadata.id << ": " << message.str() << std::endl;
  else
    FAIL() << message.str() << std::endl;
}

}  // namespace moe::proptest

#define MOE_PROPERTY(Suite, Name, ci_cases, ArgList)                                                  \
  void moe_property_##Suite##_##Name ArgList;                                                        \
  TEST(Suite, Name) {                                                                                \
    ::moe::proptest::check_property(&moe_property_##Suite##_##Name, #Suite, #Name, ci_cases);        \
  }                                                                                                  \
  void moe_property_##Suite##_##Name ArgList
