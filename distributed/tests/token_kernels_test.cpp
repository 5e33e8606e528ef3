// The CPU row movements (distributed/kernels/token_kernels.hpp) against the plain loops that define them. The
// threaded unpermute groups its inputs by target row; it must still add each target's rows in increasing input
// order, so it is compared bitwise with the sequential loop, on a size that takes the threaded path and with many
// rows per target (the order is then visible in the rounding).
#include "distributed/kernels/fp8_rows.hpp"
#include "distributed/kernels/token_kernels.hpp"
#include "reference/random_init.hpp"

#include <gtest/gtest.h>

#include <algorithm>

namespace moe::kernels {
namespace {

// Groups of 3, 0, 16 and 17 rows padded to multiples of 16: 16, 0, 16, 32; each group's rows first in its block.
TEST(Fp8RowAlignment, PadsEachExpertsRowsToAMultipleOf16) {
  const AlignedGroups a = align_groups({3, 0, 16, 17}, kFp8RowAlignment);
  EXPECT_EQ(a.group_sizes, (std::vector<std::int64_t>{16, 0, 16, 32}));
  EXPECT_EQ(a.rows, 64);
  std::vector<std::int64_t> want{0, 1, 2};
  for (std::int64_t i = 16; i < 32; ++i) want.push_back(i);
  for (std::int64_t i = 32; i < 49; ++i) want.push_back(i);
  EXPECT_EQ(a.position, want);
}

struct Case {
  Matrix<double> y, start;
  std::vector<std::int64_t> rows;
  std::vector<double> weight;
};

Case scatter_case(Eigen::Index targets, Eigen::Index inputs, Eigen::Index width, bool weighted) {
  SeededUniform rng(31);
  Case c{rng.matrix<double>(inputs, width, 1.0), rng.matrix<double>(targets, width, 1.0), {}, {}};
  for (Eigen::Index i = 0; i < inputs; ++i) {
    c.rows.push_back(static_cast<std::int64_t>(rng.bits() % static_cast<std::uint64_t>(targets)));
    if (weighted) c.weight.push_back(rng.next());
  }
  return c;
}

Matrix<double> sequential(const Case& c) {
  Matrix<double> out = c.start;
  for (size_t i = 0; i < c.rows.size(); ++i) {
    const auto src = static_cast<Eigen::Index>(i);
    if (c.weight.empty()) out.row(c.rows[i]) += c.y.row(src);
    else out.row(c.rows[i]) += c.weight[i] * c.y.row(src);
  }
  return out;
}

TEST(TokenKernels, ThreadedUnpermuteIsBitwiseTheSequentialLoop) {
  for (bool weighted : {false, true}) {
    const Case c = scatter_case(/*targets=*/64, /*inputs=*/4096, /*width=*/40, weighted);  // 163840 elements
    Matrix<double> out = c.start;
    scatter_add_rows(c.y, c.rows, c.weight, out);
    const Matrix<double> want = sequential(c);
    ASSERT_EQ(out.rows(), want.rows());
    EXPECT_TRUE((out.array() == want.array()).all()) << "weighted " << weighted << ": max |diff| "
                                                      << (out - want).cwiseAbs().maxCoeff();
  }
}

// The comparison above can fail: adding the same rows in reverse order changes some bits.
TEST(TokenKernels, TheOrderOfAdditionIsVisibleAtThisSize) {
  Case c = scatter_case(64, 4096, 40, false);
  const Matrix<double> forward = sequential(c);
  std::reverse(c.rows.begin(), c.rows.end());
  c.y = c.y.colwise().reverse().eval();
  EXPECT_FALSE((sequential(c).array() == forward.array()).all());
}

TEST(TokenKernels, UnpermuteRejectsATargetOutsideTheOutput) {
  Case c = scatter_case(8, 16, 4, false);
  c.rows[5] = 8;
  Matrix<double> out = c.start;
  EXPECT_THROW(scatter_add_rows(c.y, c.rows, c.weight, out), std::invalid_argument);
  c.rows[5] = -1;
  EXPECT_THROW(scatter_add_rows(c.y, c.rows, c.weight, out), std::invalid_argument);
}

TEST(TokenKernels, PermuteGathersTheListedRows) {
  SeededUniform rng(5);
  const Matrix<double> x = rng.matrix<double>(300, 300, 1.0);  // 90000 elements: the threaded path
  std::vector<std::int64_t> rows;
  for (int i = 0; i < 500; ++i) rows.push_back(static_cast<std::int64_t>(rng.bits() % 300));
  const Matrix<double> out = gather_rows(x, rows);
  ASSERT_EQ(out.rows(), 500);
  for (Eigen::Index i = 0; i < out.rows(); ++i)
    ASSERT_TRUE((out.row(i).array() == x.row(rows[static_cast<size_t>(i)]).array()).all()) << i;
}

}  // namespace
}  // namespace moe::kernels
