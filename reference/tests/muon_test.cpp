// Muon (reference/muon.hpp) against what other code derives: the Newton–Schulz iteration on its singular values
// (each step a scalar polynomial, the singular vectors from Eigen's SVD), the EMA momentum written out, and AdamW's
// own step for the tensors Muon does not take.
#include "reference/muon.hpp"

#include <gtest/gtest.h>

#include <Eigen/SVD>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "reference/global_step.hpp"

namespace moe {
namespace {

// The five quintic steps applied to one normalised singular value.
double quintic_polynomial(double sigma) {
  for (const auto& [a, b, c] : kQuinticNewtonSchulz)
    sigma = a * sigma + b * std::pow(sigma, 3) + c * std::pow(sigma, 5);
  return sigma;
}

// NS(u) from the SVD u = U·Σ·Vᵀ: U·p(Σ/‖u‖_F)·Vᵀ, p the composed polynomial.
Matrix<double> newton_schulz_by_svd(const Matrix<double>& u) {
  const Eigen::MatrixXd dense = u;
  Eigen::JacobiSVD<Eigen::MatrixXd> svd(dense, Eigen::ComputeThinU | Eigen::ComputeThinV);
  Eigen::VectorXd p = svd.singularValues() / dense.norm();
  for (Eigen::Index i = 0; i < p.size(); ++i) p(i) = quintic_polynomial(p(i));
  return Matrix<double>(svd.matrixU() * p.asDiagonal() * svd.matrixV().transpose());
}

Matrix<double> random_matrix(Eigen::Index rows, Eigen::Index cols, unsigned seed) {
  std::srand(seed);
  return Matrix<double>::Random(rows, cols);
}

TEST(Muon, NewtonSchulzMovesEachSingularValueByThePolynomial) {
  // A diagonal matrix: its singular values are the entries, so NS acts entry by entry.
  Matrix<double> u = Matrix<double>::Zero(3, 5);
  u(0, 0) = 3.0;
  u(1, 1) = -1.0;
  u(2, 2) = 0.2;
  const double norm = std::sqrt(9.0 + 1.0 + 0.04);
  const Matrix<double> x = newton_schulz(u);
  EXPECT_NEAR(x(0, 0), quintic_polynomial(3.0 / norm), 1e-14);
  EXPECT_NEAR(x(1, 1), -quintic_polynomial(1.0 / norm), 1e-14);
  EXPECT_NEAR(x(2, 2), quintic_polynomial(0.2 / norm), 1e-14);
  EXPECT_EQ((x.array() != 0).count(), 3);
  // The quintic set pushes every singular value of a normalised matrix towards 1 without reaching it exactly.
  EXPECT_GT(quintic_polynomial(0.2 / norm), 0.6);
  EXPECT_LT(quintic_polynomial(3.0 / norm), 1.3);
}

TEST(Muon, NewtonSchulzIsThePolarFactorThroughTheSvd) {
  for (const auto& [rows, cols] : {std::pair{4, 7}, std::pair{7, 4}, std::pair{5, 5}, std::pair{1, 6}}) {
    const Matrix<double> u = random_matrix(rows, cols, 3 + static_cast<unsigned>(rows));
    EXPECT_LT((newton_schulz(u) - newton_schulz_by_svd(u)).cwiseAbs().maxCoeff(), 1e-12) << rows << "x" << cols;
  }
}

TEST(Muon, NewtonSchulzWorksOnTheSmallGramMatrixEitherWay) {
  // A tall matrix is transposed before the iteration, so NS(uᵀ) is NS(u)ᵀ to the bit.
  const Matrix<double> tall = random_matrix(9, 4, 11);
  EXPECT_EQ(Matrix<double>(newton_schulz(tall).transpose()), newton_schulz(Matrix<double>(tall.transpose())));
  // Scale free (above the 1e-7 floor of the normalisation).
  EXPECT_LT((newton_schulz(tall) - newton_schulz(Matrix<double>(1e3 * tall))).cwiseAbs().maxCoeff(), 1e-13);
  EXPECT_EQ(newton_schulz(Matrix<double>::Zero(2, 3)), Matrix<double>::Zero(2, 3));
}

ModelConfig small_model() {
  ModelConfig m;
  m.layer.hidden = 6;
  m.layer.num_experts = 4;
  m.layer.topk = 2;
  m.layer.ffn_hidden = 2;  // expert fc1 [4, 6], fc2 [6, 2]
  m.layer.score_function = ScoreFunction::softmax;
  m.num_layers = 2;
  m.vocab = 12;
  return m;
}

TEST(Muon, TwoStepsFollowTheFormulas) {
  const ModelConfig c = small_model();
  const MuonConfig muon{.lr = 0.02, .momentum = 0.9, .nesterov = true, .weight_decay = 0.1, .extra_scale = 0.5};
  const AdamConfig adam{0.01, 0.9, 0.95, 1e-8, 0.1};
  const auto start = random_model_params<double>(c, 15);
  const ModelParams<double> g1 = random_model_params<double>(c, 16), g2 = random_model_params<double>(c, 17);

  ModelParams<double> params = start, grads = g1;
  AdamState state;
  muon_step(c, muon, adam, state, params, grads);
  const ModelParams<double> after_one = params;
  grads = g2;
  muon_step(c, muon, adam, state, params, grads);
  EXPECT_EQ(state.step, 2);

  // A Muon matrix (an expert's fc1, 4 × 6): momentum m₂ = β(1−β)·g₁ + (1−β)·g₂, nesterov u = g₂ + β(m₂ − g₂),
  // θ₂ = θ₁(1 − lr·wd) − lr·extra·√6·NS(u).
  const auto& fc1_g1 = g1.layers[1].expert_fc1[2];
  const auto& fc1_g2 = g2.layers[1].expert_fc1[2];
  const Matrix<double> m2 = 0.9 * 0.1 * fc1_g1 + 0.1 * fc1_g2;
  const Matrix<double> u = fc1_g2 + 0.9 * (m2 - fc1_g2);
  const Matrix<double> want =
      after_one.layers[1].expert_fc1[2] * (1 - 0.02 * 0.1) - 0.02 * 0.5 * std::sqrt(6.0) * newton_schulz_by_svd(u);
  EXPECT_LT((params.layers[1].expert_fc1[2] - want).cwiseAbs().maxCoeff(), 1e-14);
  const auto names = trained_tensors(c, params);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].name != "layer1.expert_fc1[2]") continue;
    EXPECT_LT((Eigen::Map<const Matrix<double>>(state.m[i].data(), 4, 6) - m2).cwiseAbs().maxCoeff(), 1e-16);
    EXPECT_EQ(Eigen::Map<const Matrix<double>>(state.v[i].data(), 4, 6), Matrix<double>::Zero(4, 6));
  }

  // What Muon does not take (the embedding, the head, the norms) moves exactly as AdamW moves it.
  ModelParams<double> adam_params = start, adam_grads = g1;
  AdamState adam_state;
  adam_step(c, adam, adam_state, adam_params, adam_grads);
  adam_grads = g2;
  adam_step(c, adam, adam_state, adam_params, adam_grads);
  EXPECT_EQ(params.embedding, adam_params.embedding);
  EXPECT_EQ(params.head, adam_params.head);
  EXPECT_EQ(params.final_norm, adam_params.final_norm);
  EXPECT_EQ(params.block_norm[1], adam_params.block_norm[1]);
  EXPECT_NE(params.layers[0].router_weight, adam_params.layers[0].router_weight);  // a matrix: Muon's
}

TEST(Muon, TakesEveryMatrixButTheEmbeddingAndTheHead) {
  EXPECT_TRUE(is_muon_matrix("layer0.router_weight", {4, 6}));
  EXPECT_TRUE(is_muon_matrix("layer0.shared_gate", {1, 6}));
  EXPECT_FALSE(is_muon_matrix("embedding", {12, 6}));
  EXPECT_FALSE(is_muon_matrix("head", {12, 6}));
  EXPECT_FALSE(is_muon_matrix("layer0.block_norm", {6}));
  EXPECT_EQ(muon_spectral_scale(4, 9), 3.0);
}

// NVIDIA's emerging_optimizers (what Megatron-Core's Muon calls), in float32, written by
// tests/data/muon_emerging_optimizers.py: Newton–Schulz on four shapes and two Muon steps with and without Nesterov.
// The oracle (double) on the same float32 inputs must agree to float32's accuracy: within 2e-5 of the values (about
// 2^−15: float32's 2^−24 per operation grown by Newton–Schulz's slope, up to 493).
Matrix<double> read_hex_row(std::istream& in, Eigen::Index rows, Eigen::Index cols) {
  std::string line;
  std::getline(in, line);
  std::istringstream words(line);
  Matrix<double> m(rows, cols);
  std::string word;
  for (Eigen::Index i = 0; i < m.size(); ++i) {
    words >> word;
    m.data()[i] = std::strtod(word.c_str(), nullptr);
  }
  return m;
}

TEST(Muon, MatchesNvidiasEmergingOptimizers) {
  std::ifstream file(std::string(REFERENCE_TEST_DATA) + "/muon_emerging_optimizers.txt");
  ASSERT_TRUE(file) << "missing test data";
  std::string line;
  int ns_cases = 0, muon_cases = 0;
  while (std::getline(file, line)) {
    std::istringstream head(line);
    std::string kind;
    Eigen::Index rows = 0, cols = 0;
    int nesterov = 0;
    head >> kind;
    if (kind == "ns") {
      head >> rows >> cols;
      const Matrix<double> x = read_hex_row(file, rows, cols), want = read_hex_row(file, rows, cols);
      EXPECT_LT((newton_schulz(x) - want).cwiseAbs().maxCoeff(), 2e-5) << rows << "x" << cols;
      ++ns_cases;
    } else if (kind == "muon") {
      head >> nesterov >> rows >> cols;
      const Matrix<double> p0 = read_hex_row(file, rows, cols), g1 = read_hex_row(file, rows, cols),
                           g2 = read_hex_row(file, rows, cols), want = read_hex_row(file, rows, cols);
      const MuonConfig muon{
          .lr = 0.02, .momentum = 0.9, .nesterov = nesterov != 0, .weight_decay = 0.1, .extra_scale = 0.5};
      Matrix<double> p = p0, m = Matrix<double>::Zero(rows, cols);
      for (const Matrix<double>* g : {&g1, &g2}) {  // muon_step's matrix branch, on one matrix
        m += (1 - muon.momentum) * (*g - m);
        const Matrix<double> direction = muon_direction(muon, m, *g);
        p *= 1 - muon.lr * muon.weight_decay;
        p -= muon.lr * direction;
      }
      EXPECT_LT((p - want).cwiseAbs().maxCoeff(), 2e-5) << "nesterov " << nesterov;
      EXPECT_GT((p - p0).cwiseAbs().maxCoeff(), 1e-3);  // the steps moved the matrix
      ++muon_cases;
    }
  }
  EXPECT_EQ(ns_cases, 4);
  EXPECT_EQ(muon_cases, 2);
}

}  // namespace
}  // namespace moe
