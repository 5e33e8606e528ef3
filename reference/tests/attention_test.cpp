// Causal GQA attention with RoPE (reference/attention.hpp): its backward against central differences of a scalar
// of its output, causality and sequence separation to the bit, RoPE's rotation and its relative-position property,
// and a one-token case by hand.
#include "reference/attention.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "reference/random_init.hpp"
#include "reference/tolerance.hpp"

namespace moe {
namespace {

constexpr AttentionConfig kGqa{.heads = 4, .groups = 2, .head_dim = 4, .rope_base = 10.0};
constexpr int kHidden = 6, kSeq = 5, kBatch = 2;

AttentionParams random_attention(const AttentionConfig& c, int hidden, std::uint64_t seed) {
  SeededUniform rng(seed);
  const int qd = c.heads * c.head_dim, kd = c.groups * c.head_dim;
  return {rng.matrix<double>(qd, hidden, 0.5), rng.matrix<double>(kd, hidden, 0.5), rng.matrix<double>(kd, hidden, 0.5),
          rng.matrix<double>(hidden, qd, 0.5)};
}

// J = Σ C ⊙ out for a fixed random C: dJ/dout = C.
double objective(const AttentionConfig& c, const AttentionParams& p, const Matrix<double>& x, const Matrix<double>& w) {
  return (attention_forward(c, p, x, kBatch).out.array() * w.array()).sum();
}

// Central differences of J in every element of `m`, against the analytic gradient `analytic`.
void expect_matches_central_differences(const std::string& name, Matrix<double>& m, const Matrix<double>& analytic,
                                        const std::function<double()>& j) {
  const Tolerance tol = tolerance(Compared::finite_difference, Precision::float64);
  const double h = 1e-6;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    const double keep = m.data()[i];
    m.data()[i] = keep + h;
    const double up = j();
    m.data()[i] = keep - h;
    const double down = j();
    m.data()[i] = keep;
    const double numeric = (up - down) / (2 * h);
    EXPECT_TRUE(tol.admits(analytic.data()[i], numeric))
        << name << "[" << i << "]: " << analytic.data()[i] << " vs " << numeric;
  }
}

TEST(Attention, BackwardMatchesCentralDifferences) {
  AttentionParams p = random_attention(kGqa, kHidden, 3);
  SeededUniform rng(4);
  Matrix<double> x = rng.matrix<double>(kSeq * kBatch, kHidden, 1.0);
  const Matrix<double> w = rng.matrix<double>(kSeq * kBatch, kHidden, 1.0);
  const AttentionGrads g = attention_backward(kGqa, p, x, kBatch, attention_forward(kGqa, p, x, kBatch), w);
  auto j = [&] { return objective(kGqa, p, x, w); };
  expect_matches_central_differences("x", x, g.dx, j);
  expect_matches_central_differences("wq", p.wq, g.params.wq, j);
  expect_matches_central_differences("wk", p.wk, g.params.wk, j);
  expect_matches_central_differences("wv", p.wv, g.params.wv, j);
  expect_matches_central_differences("wo", p.wo, g.params.wo, j);
}

TEST(Attention, ATokenSeesOnlyEarlierPositionsOfItsOwnSequence) {
  const AttentionParams p = random_attention(kGqa, kHidden, 5);
  SeededUniform rng(6);
  const Matrix<double> x = rng.matrix<double>(kSeq * kBatch, kHidden, 1.0);
  Matrix<double> changed = x;
  changed.row(3 * kBatch + 0).array() += 0.25;  // position 3 of sequence 0
  const Matrix<double> a = attention_forward(kGqa, p, x, kBatch).out;
  const Matrix<double> b = attention_forward(kGqa, p, changed, kBatch).out;
  for (int s = 0; s < kSeq; ++s) {
    EXPECT_EQ(a.row(s * kBatch + 1), b.row(s * kBatch + 1)) << "sequence 1, position " << s;
    if (s < 3)
      EXPECT_EQ(a.row(s * kBatch), b.row(s * kBatch)) << "sequence 0, position " << s;
    else
      EXPECT_NE(a.row(s * kBatch), b.row(s * kBatch)) << "sequence 0, position " << s;
  }
}

TEST(Attention, RopeRotatesPairsHalfAHeadApart) {
  // d = 4: pair (0, 2) turns by s·base^0 = s, pair (1, 3) by s·base^(−1/2).
  double row[4] = {1.0, 1.0, 0.0, 0.0};
  apply_rope(row, 1, 4, 100.0, 2);
  EXPECT_NEAR(row[0], std::cos(2.0), 1e-15);
  EXPECT_NEAR(row[2], std::sin(2.0), 1e-15);
  EXPECT_NEAR(row[1], std::cos(0.2), 1e-15);
  EXPECT_NEAR(row[3], std::sin(0.2), 1e-15);
  apply_rope(row, 1, 4, 100.0, 2, true);
  EXPECT_NEAR(row[0], 1.0, 1e-15);
  EXPECT_NEAR(row[3], 0.0, 1e-15);
}

TEST(Attention, RopeScoresDependOnlyOnTheDistance) {
  SeededUniform rng(7);
  const Matrix<double> a = rng.matrix<double>(1, 8, 1.0), b = rng.matrix<double>(1, 8, 1.0);
  auto score = [&](int sa, int sb) {
    Matrix<double> ra = a, rb = b;
    apply_rope(ra.data(), 2, 4, 10.0, sa);
    apply_rope(rb.data(), 2, 4, 10.0, sb);
    return ra.row(0).dot(rb.row(0));
  };
  EXPECT_NEAR(score(5, 2), score(9, 6), 1e-13);
  EXPECT_NEAR(score(0, 0), a.row(0).dot(b.row(0)), 1e-15);
  EXPECT_GT(std::abs(score(5, 2) - score(5, 3)), 1e-3);
}

TEST(Attention, OneTokenAttendsToItselfOnly) {
  // One position: the softmax is 1, so out = v·Woᵀ with v = x·Wvᵀ (RoPE at position 0 is the identity), each query
  // head reading its group's value.
  const AttentionConfig c{.heads = 2, .groups = 1, .head_dim = 2};
  const AttentionParams p = random_attention(c, 3, 8);
  SeededUniform rng(9);
  const Matrix<double> x = rng.matrix<double>(1, 3, 1.0);
  const Matrix<double> v = x * p.wv.transpose();
  Matrix<double> o(1, 4);
  o << v(0, 0), v(0, 1), v(0, 0), v(0, 1);
  const Matrix<double> want = o * p.wo.transpose();
  EXPECT_LT((attention_forward(c, p, x, 1).out - want).cwiseAbs().maxCoeff(), 1e-15);
}

TEST(Attention, BadShapesAreRefused) {
  EXPECT_THROW((AttentionConfig{.heads = 3, .groups = 2, .head_dim = 4}.validate()), std::invalid_argument);
  EXPECT_THROW((AttentionConfig{.heads = 2, .groups = 2, .head_dim = 3}.validate()), std::invalid_argument);
  const AttentionParams p = random_attention(kGqa, kHidden, 1);
  EXPECT_THROW(attention_forward(kGqa, p, Matrix<double>::Zero(7, kHidden), 2), std::invalid_argument);
  EXPECT_THROW(attention_forward(kGqa, p, Matrix<double>::Zero(4, kHidden + 1), 2), std::invalid_argument);
}

}  // namespace
}  // namespace moe
