// Every stored layer case, written by the per-token oracle, holds for the expert-batched path too: the fast path
// reproduces each case's outputs within the case's own tolerance (and none of them needs more).
#include "golden/case_compare.hpp"
#include "golden/case_oracle.hpp"
#include "golden/golden_case.hpp"
#include "golden/case_files.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>

namespace moe::golden {
namespace {

namespace fs = std::filesystem;

bool layer_case(const fs::path& dir) {
  if (!is_case_directory(dir)) return false;
  return case_format_of(read_case_json(dir), (dir / kCaseJson).string()).rfind("moe-golden-model/", 0) != 0;
}

TEST(ExpertBatched, ReproducesEveryStoredLayerCase) {
  int cases = 0;
  for (const auto& entry : fs::directory_iterator(GOLDEN_CASES_DIR)) {
    if (!layer_case(entry.path())) continue;
    SCOPED_TRACE(entry.path().filename().string());
    const GoldenCase c = read_case(entry.path());
    for (const TensorComparison& t :
         compare_outputs(c, oracle_outputs(c.header.config, oracle_inputs(c), ExpertPath::expert_batched)))
      EXPECT_TRUE(t.pass()) << t.name << ": max |Δ| " << t.max_abs << ", " << t.failing << " elements outside";
    ++cases;
  }
  EXPECT_GE(cases, 40);  // the layer cases of golden/cases (59 folders, the rest model cases)
}

}  // namespace
}  // namespace moe::golden
