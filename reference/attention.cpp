#include "reference/attention.hpp"

#include "reference/bf16.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moe {

void AttentionConfig::validate() const {
  if (heads < 1 || groups < 1) throw std::invalid_argument("attention: heads and groups must be >= 1");
  if (heads % groups != 0) throw std::invalid_argument("attention: heads must be a multiple of groups (GQA)");
  if (head_dim < 2 || head_dim % 2 != 0) throw std::invalid_argument("attention: the head width must be even");
  if (!(rope_base > 1)) throw std::invalid_argument("attention: the RoPE base must be > 1");
}

void apply_rope(double* row, int heads, int head_dim, double base, int position, bool inverse) {
  const int half = head_dim / 2;
  for (int h = 0; h < heads; ++h) {
    double* head = row + static_cast<std::ptrdiff_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const double phi = position * std::pow(base, -2.0 * i / head_dim);
      const double c = std::cos(phi), s = inverse ? -std::sin(phi) : std::sin(phi);
      const double a = head[i], b = head[i + half];
      head[i] = a * c - b * s;
      head[i + half] = b * c + a * s;
    }
  }
}

namespace {

void check_shapes(const AttentionConfig& c, const AttentionParams& p, const Matrix<double>& x, int batch) {
  c.validate();
  const Eigen::Index h = x.cols(), qd = Eigen::Index{c.heads} * c.head_dim, kd = Eigen::Index{c.groups} * c.head_dim;
  if (batch < 1 || x.rows() % batch != 0) throw std::invalid_argument("attention: the rows must be seq · batch");
  if (p.wq.rows() != qd || p.wq.cols() != h || p.wk.rows() != kd || p.wk.cols() != h || p.wv.rows() != kd ||
      p.wv.cols() != h || p.wo.rows() != h || p.wo.cols() != qd)
    throw std::invalid_argument("attention: weight shapes must be wq [H·d, h], wk and wv [G·d, h], wo [h, H·d]");
}

}  // namespace

AttentionForward attention_forward(const AttentionConfig& c, const AttentionParams& p, const Matrix<double>& x,
                                   int batch) {
  check_shapes(c, p, x, batch);
  const int d = c.head_dim, per_group = c.heads / c.groups;
  const Eigen::Index seq = x.rows() / batch;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  AttentionForward f;
  std::vector<int> positions(static_cast<size_t>(x.rows()));
  for (Eigen::Index t = 0; t < x.rows(); ++t) positions[static_cast<size_t>(t)] = static_cast<int>(t / batch);
  projection_forward(c, p, x, positions, f.q, f.k, f.v);
  f.o = Matrix<double>::Zero(x.rows(), f.q.cols());
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < c.heads; ++j) {
      const int g = j / per_group;
      Matrix<double> probs = Matrix<double>::Zero(seq, seq);
      for (Eigen::Index s = 0; s < seq; ++s) {
        const Eigen::Index t = s * batch + b;
        for (Eigen::Index u = 0; u <= s; ++u)
          probs(s, u) = attention_head(f.q, t, j, d).dot(attention_head(f.k, u * batch + b, g, d)) * scale;
        const double top = probs.row(s).head(s + 1).maxCoeff();
        probs.row(s).head(s + 1) = (probs.row(s).head(s + 1).array() - top).exp().matrix();
        probs.row(s).head(s + 1) /= probs.row(s).head(s + 1).sum();
        for (Eigen::Index u = 0; u <= s; ++u)
          attention_head(f.o, t, j, d) += probs(s, u) * attention_head(f.v, u * batch + b, g, d);
      }
      f.probs.push_back(std::move(probs));  // index b·H + j
    }
  f.o = stored(c.bf16, std::move(f.o));
  f.out = stored(c.bf16, Matrix<double>(f.o * p.wo.transpose()));
  return f;
}

AttentionGrads attention_backward(const AttentionConfig& c, const AttentionParams& p, const Matrix<double>& x,
                                  int batch, const AttentionForward& f, const Matrix<double>& dout) {
  check_shapes(c, p, x, batch);
  if (dout.rows() != x.rows() || dout.cols() != x.cols())
    throw std::invalid_argument("attention backward: the output gradient must have the input's shape");
  const int d = c.head_dim, per_group = c.heads / c.groups;
  const Eigen::Index seq = x.rows() / batch;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  AttentionGrads grads;
  grads.params.wo = dout.transpose() * f.o;
  const Matrix<double> d_o = stored(c.bf16, Matrix<double>(dout * p.wo));
  Matrix<double> dq = Matrix<double>::Zero(f.q.rows(), f.q.cols());
  Matrix<double> dk = Matrix<double>::Zero(f.k.rows(), f.k.cols());
  Matrix<double> dv = Matrix<double>::Zero(f.v.rows(), f.v.cols());
  for (int b = 0; b < batch; ++b)
    for (int j = 0; j < c.heads; ++j) {
      const int g = j / per_group;
      const Matrix<double>& probs = f.probs[static_cast<size_t>(b * c.heads + j)];
      for (Eigen::Index s = 0; s < seq; ++s) {
        const Eigen::Index t = s * batch + b;
        // dp_u = ⟨do_t, v_u⟩; softmax backward: ds_u = p_u·(dp_u − Σ p·dp), where Σ p·dp = ⟨do_t, o_t⟩ is taken
        // from the stored o, as FlashAttention's backward does (under bf16 storage o is the rounded one).
        Vector<double> dp(s + 1);
        for (Eigen::Index u = 0; u <= s; ++u)
          dp(u) = attention_head(d_o, t, j, d).dot(attention_head(f.v, u * batch + b, g, d));
        const double mean = attention_head(d_o, t, j, d).dot(attention_head(f.o, t, j, d));
        for (Eigen::Index u = 0; u <= s; ++u) {
          const Eigen::Index tu = u * batch + b;
          const double ds = probs(s, u) * (dp(u) - mean) * scale;
          attention_head(dq, t, j, d) += ds * attention_head(f.k, tu, g, d);
          attention_head(dk, tu, g, d) += ds * attention_head(f.q, t, j, d);
          attention_head(dv, tu, g, d) += probs(s, u) * attention_head(d_o, t, j, d);
        }
      }
    }
  std::vector<int> positions(static_cast<size_t>(x.rows()));
  for (Eigen::Index t = 0; t < x.rows(); ++t) positions[static_cast<size_t>(t)] = static_cast<int>(t / batch);
  projection_backward(c, p, x, positions, std::move(dq), std::move(dk), dv, grads);
  grads.dx = stored(c.bf16, std::move(grads.dx));
  return grads;
}

void projection_forward(const AttentionConfig& c, const AttentionParams& p, const Matrix<double>& x,
                        const std::vector<int>& row_positions, Matrix<double>& q, Matrix<double>& k,
                        Matrix<double>& v) {
  q = stored(c.bf16, Matrix<double>(x * p.wq.transpose()));
  k = stored(c.bf16, Matrix<double>(x * p.wk.transpose()));
  v = stored(c.bf16, Matrix<double>(x * p.wv.transpose()));
  for (Eigen::Index t = 0; t < x.rows(); ++t) {
    const int position = row_positions[static_cast<size_t>(t)];
    apply_rope(q.row(t).data(), c.heads, c.head_dim, c.rope_base, position);
    apply_rope(k.row(t).data(), c.groups, c.head_dim, c.rope_base, position);
  }
  q = stored(c.bf16, std::move(q));
  k = stored(c.bf16, std::move(k));
}

void projection_backward(const AttentionConfig& c, const AttentionParams& p, const Matrix<double>& x,
                         const std::vector<int>& row_positions, Matrix<double> dq, Matrix<double> dk,
                         const Matrix<double>& dv_whole, AttentionGrads& grads) {
  const Matrix<double> dv = stored(c.bf16, dv_whole);
  dq = stored(c.bf16, std::move(dq));
  dk = stored(c.bf16, std::move(dk));
  for (Eigen::Index t = 0; t < x.rows(); ++t) {  // RoPE is a rotation: its backward rotates back
    const int position = row_positions[static_cast<size_t>(t)];
    apply_rope(dq.row(t).data(), c.heads, c.head_dim, c.rope_base, position, true);
    apply_rope(dk.row(t).data(), c.groups, c.head_dim, c.rope_base, position, true);
  }
  dq = stored(c.bf16, std::move(dq));
  dk = stored(c.bf16, std::move(dk));
  grads.params.wq = dq.transpose() * x;
  grads.params.wk = dk.transpose() * x;
  grads.params.wv = dv.transpose() * x;
  grads.dx = dq * p.wq + dk * p.wk + dv * p.wv;
}

}  // namespace moe
