#include "proptests/property.hpp"

#include <cstdlib>
#include <string>

namespace moe::proptest {
namespace {

int soak_factor() {
  const char* soak = std::getenv("MOE_SOAK");
  if (!soak || !*soak) return 0;
  return std::max(1, std::atoi(soak));
}

// Whether RC_PARAMS names this key (then RapidCheck's configuration already holds its value).
bool rc_params_set(const std::string& key) {
  const char* params = std::getenv("RC_PARAMS");
  return params && std::string(params).find(key + "=") != std::string::npos;
}

}  // namespace

int case_budget(int ci_cases) {
  const int soak = soak_factor();
  return soak > 0 ? soak * 25 * ci_cases : ci_cases;
}

rc::detail::TestParams test_params(int ci_cases) {
  rc::detail::TestParams params = rc::detail::configuration().testParams;
  if (!rc_params_set("max_success")) params.maxSuccess = case_budget(ci_cases);
  if (!rc_params_set("seed") && soak_factor() == 0) params.seed = kCiSeed;
  return params;
}

}  // namespace moe::proptest
