// The one tolerance table (reference/tolerance.hpp): the comparison rule at its edges, and the table's shape.
#include "reference/tolerance.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>

namespace moe {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Compared kAll[] = {Compared::training_step,  Compared::layer,          Compared::golden_case,
                             Compared::foreign_dump,   Compared::device_kernel,  Compared::token_movement,
                             Compared::finite_difference, Compared::muon_step};

TEST(Tolerance, AdmitsUpToTheBoundAndNotBeyond) {
  const Tolerance t{0.5, 0.25};  // exact in binary: the bound for want = 2 is 1
  EXPECT_TRUE(t.admits(3.0, 2.0));
  EXPECT_TRUE(t.admits(1.0, 2.0));
  EXPECT_FALSE(t.admits(std::nextafter(3.0, 4.0), 2.0));
  EXPECT_DOUBLE_EQ(t.ratio(2.5, 2.0), 0.5);
  EXPECT_DOUBLE_EQ(t.ratio(3.0, 2.0), 1.0);
}

TEST(Tolerance, NanAndInfinityNeverPass) {
  const Tolerance t{1.0, 1.0};
  for (double bad : {std::nan(""), kInf, -kInf}) {
    EXPECT_FALSE(t.admits(bad, 1.0)) << bad;
    EXPECT_EQ(t.ratio(bad, 1.0), kInf) << bad;
  }
  EXPECT_FALSE(t.admits(1.0, std::nan("")));
  EXPECT_FALSE(t.admits(kInf, kInf));  // inf − inf is NaN: an expected infinity is no free pass
}

TEST(Tolerance, ZeroToleranceDemandsEquality) {
  const Tolerance exact{};
  EXPECT_TRUE(exact.admits(0.1, 0.1));
  EXPECT_EQ(exact.ratio(0.1, 0.1), 0.0);
  EXPECT_FALSE(exact.admits(std::nextafter(0.1, 1.0), 0.1));
  EXPECT_EQ(exact.ratio(std::nextafter(0.1, 1.0), 0.1), kInf);
}

// Every comparison has a double row; where a comparison has a float (or bf16) row it is looser than the one above
// it, never tighter; and every row is positive.
TEST(ToleranceTable, RowsAreOrderedByPrecision) {
  for (Compared what : kAll) {
    const Tolerance f64 = tolerance(what, Precision::float64);
    EXPECT_GT(f64.atol, 0.0) << to_string(what);
    EXPECT_GT(f64.rtol, 0.0) << to_string(what);
    Tolerance tighter = f64;
    for (Precision p : {Precision::float32, Precision::bfloat16}) {
      try {
        const Tolerance t = tolerance(what, p);
        EXPECT_GE(t.atol, tighter.atol) << to_string(what) << " " << to_string(p);
        EXPECT_GE(t.rtol, tighter.rtol) << to_string(what) << " " << to_string(p);
        tighter = t;
      } catch (const std::invalid_argument&) {
      }
    }
  }
}

// Double comparisons of reassociated sums must still catch a wrong factor of 1 + 1e-6 on values of size 1 (the
// smallest scaling bug the properties are asked to find); the finite-difference row is the one exception, by design.
TEST(ToleranceTable, DoubleRowsCatchAFactorOfOnePlusOneMillionth) {
  for (Compared what : kAll) {
    if (what == Compared::finite_difference) continue;
    EXPECT_FALSE(tolerance(what, Precision::float64).admits(1.0 + 1e-6, 1.0)) << to_string(what);
  }
}

TEST(ToleranceTable, AMissingRowIsAnErrorNamingIt) {
  try {
    (void)tolerance(Compared::golden_case, Precision::float32);
    FAIL() << "golden cases are double only";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("golden_case in float32"), std::string::npos) << e.what();
  }
}

TEST(ToleranceTable, NamesRoundTrip) {
  for (Compared what : kAll) EXPECT_EQ(parse_compared(to_string(what)), what);
  for (Precision p : {Precision::float64, Precision::float32, Precision::bfloat16})
    EXPECT_EQ(parse_precision(to_string(p)), p);
  EXPECT_THROW(parse_compared("step"), std::invalid_argument);
  EXPECT_THROW(parse_precision("fp16"), std::invalid_argument);
}

}  // namespace
}  // namespace moe
