#include "distributed/train/cp_attention.hpp"

#include <cmath>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>

#include "distributed/comm/row_collectives.hpp"
#include "reference/bf16.hpp"

namespace moe::dist {

std::vector<int> cp_positions(int seq, int cp, int rank) {
  std::vector<int> positions;
  if (cp == 1 && rank == 0 && seq > 0) {  // no context parallelism: every position, in order, whatever seq is
    for (int s = 0; s < seq; ++s) positions.push_back(s);
    return positions;
  }
  if (cp < 1 || rank < 0 || rank >= cp || seq % (2 * cp) != 0)
    throw std::invalid_argument("context parallelism: seq must divide by 2·cp and 0 <= rank < cp");
  const int chunk = seq / (2 * cp);
  for (int s = rank * chunk; s < (rank + 1) * chunk; ++s) positions.push_back(s);
  const int mirror = 2 * cp - 1 - rank;
  for (int s = mirror * chunk; s < (mirror + 1) * chunk; ++s) positions.push_back(s);
  return positions;
}

namespace {

// The K and V rows of one owner (rows i·batch + b, position positions[i]) and, in the backward, their gradients.
struct KvBlock {
  Matrix<double> k, v, dk, dv;
  std::vector<int> positions;
};

// Calls visit(t, j, key_row, score) for every local query row t, head j and key row of `block` that the query may
// see (its sequence, a position ≤ its own), score = ⟨q, k⟩/√d.
template <typename Visit>
void for_visible_keys(const AttentionConfig& c, const CpAttentionForward& f, int batch, const KvBlock& block,
                      Visit visit) {
  const int d = c.head_dim, per_group = c.heads / c.groups;
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (size_t i = 0; i < f.positions.size(); ++i)
    for (int b = 0; b < batch; ++b) {
      const Eigen::Index t = static_cast<Eigen::Index>(i) * batch + b;
      for (size_t u = 0; u < block.positions.size(); ++u) {
        if (block.positions[u] > f.positions[i]) continue;
        const Eigen::Index key = static_cast<Eigen::Index>(u) * batch + b;
        for (int j = 0; j < c.heads; ++j)
          visit(t, j, key, attention_head(f.q, t, j, d).dot(attention_head(block.k, key, j / per_group, d)) * scale);
      }
    }
}

// Every rank's block, gathered (all_gather).
std::vector<KvBlock> gather_blocks(const CpAttentionForward& f, int seq, Communicator& cp) {
  const int n = cp.size();
  Matrix<double> k(f.k.rows() * n, f.k.cols()), v(f.v.rows() * n, f.v.cols());
  cp.allgather<double>(const_span_of(f.k), span_of(k));
  cp.allgather<double>(const_span_of(f.v), span_of(v));
  std::vector<KvBlock> blocks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    KvBlock& b = blocks[static_cast<size_t>(r)];
    b.k = k.middleRows(r * f.k.rows(), f.k.rows());
    b.v = v.middleRows(r * f.v.rows(), f.v.rows());
    b.positions = cp_positions(seq, n, r);
  }
  return blocks;
}

// The ring step: send the block in hand (with `fields` of it) to the next rank, take the previous rank's.
void pass_on(KvBlock& block, Communicator& cp, int step, bool with_grads, int seq) {
  const int n = cp.size(), next = (cp.rank() + 1) % n, prev = (cp.rank() + n - 1) % n;
  std::vector<Matrix<double>*> fields{&block.k, &block.v};
  if (with_grads) fields.insert(fields.end(), {&block.dk, &block.dv});
  for (size_t f = 0; f < fields.size(); ++f)
    cp.send<double>(const_span_of(*fields[f]), next, step * 4 + static_cast<int>(f));
  for (size_t f = 0; f < fields.size(); ++f) cp.recv<double>(span_of(*fields[f]), prev, step * 4 + static_cast<int>(f));
  // The block now in hand started at rank (rank − step − 1) mod n.
  block.positions = cp_positions(seq, n, ((cp.rank() - step - 1) % n + n) % n);
}

// The sequence position of each row t = s·batch + b of this rank's chunk.
std::vector<int> row_positions(const std::vector<int>& positions, Eigen::Index rows, int batch) {
  std::vector<int> at(static_cast<size_t>(rows));
  for (Eigen::Index t = 0; t < rows; ++t) at[static_cast<size_t>(t)] = positions[static_cast<size_t>(t / batch)];
  return at;
}

}  // namespace

CpAttentionForward cp_attention_forward(const AttentionConfig& c, const AttentionParams& p, const Matrix<double>& x,
                                        int batch, int seq, Communicator& cp, KvExchange exchange) {
  c.validate();
  CpAttentionForward f;
  f.positions = cp_positions(seq, cp.size(), cp.rank());
  if (x.rows() != static_cast<Eigen::Index>(f.positions.size()) * batch)
    throw std::invalid_argument("cp attention: a rank holds seq/cp positions of each of its sequences");
  const int d = c.head_dim, per_group = c.heads / c.groups;
  projection_forward(c, p, x, row_positions(f.positions, x.rows(), batch), f.q, f.k, f.v);
  // Online softmax over the blocks: running max m, running sum l, unnormalised output o.
  Matrix<double> m = Matrix<double>::Constant(x.rows(), c.heads, -std::numeric_limits<double>::infinity());
  Matrix<double> l = Matrix<double>::Zero(x.rows(), c.heads);
  f.o = Matrix<double>::Zero(x.rows(), f.q.cols());
  auto attend = [&](const KvBlock& block) {
    for_visible_keys(c, f, batch, block, [&](Eigen::Index t, int j, Eigen::Index key, double score) {
      if (score > m(t, j)) {
        const double shrink = std::exp(m(t, j) - score);
        l(t, j) *= shrink;
        attention_head(f.o, t, j, d) *= shrink;
        m(t, j) = score;
      }
      const double w = std::exp(score - m(t, j));
      l(t, j) += w;
      attention_head(f.o, t, j, d) += w * attention_head(block.v, key, j / per_group, d);
    });
  };
  if (exchange == KvExchange::all_gather) {
    for (const KvBlock& block : gather_blocks(f, seq, cp)) attend(block);
  } else {
    KvBlock block{f.k, f.v, {}, {}, f.positions};
    const int steps = cp.size();
    for (int step = 0; step < steps; ++step) {
      attend(block);
      if (step + 1 < cp.size()) pass_on(block, cp, step, false, seq);
    }
  }
  f.lse = m.array() + l.array().log();
  for (Eigen::Index t = 0; t < x.rows(); ++t)
    for (int j = 0; j < c.heads; ++j) attention_head(f.o, t, j, d) /= l(t, j);  // every query sees itself: l ≥ 1
  f.o = stored(c.bf16, std::move(f.o));  // whole: every block has been attended
  f.out = f.o * p.wo.transpose();         // partial over TP: the caller stores it once reduced
  return f;
}

AttentionGrads cp_attention_backward(const AttentionConfig& c, const AttentionParams& p, const Matrix<double>& x,
                                     int batch, int seq, Communicator& cp, KvExchange exchange,
                                     const CpAttentionForward& f, const Matrix<double>& dout) {
  const int d = c.head_dim, per_group = c.heads / c.groups;
  AttentionGrads grads;
  grads.params.wo = dout.transpose() * f.o;
  const Matrix<double> d_o = stored(c.bf16, Matrix<double>(dout * p.wo));
  // D = Σ dO ⊙ O per row and head: the softmax backward's Σ_u p_u·dp_u.
  Matrix<double> D(x.rows(), c.heads);
  for (Eigen::Index t = 0; t < x.rows(); ++t)
    for (int j = 0; j < c.heads; ++j) D(t, j) = attention_head(d_o, t, j, d).dot(attention_head(f.o, t, j, d));
  Matrix<double> dq = Matrix<double>::Zero(f.q.rows(), f.q.cols());
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  auto backward_block = [&](KvBlock& block) {
    for_visible_keys(c, f, batch, block, [&](Eigen::Index t, int j, Eigen::Index key, double score) {
      const int g = j / per_group;
      const double prob = std::exp(score - f.lse(t, j));
      const double ds = prob * (attention_head(d_o, t, j, d).dot(attention_head(block.v, key, g, d)) - D(t, j)) * scale;
      attention_head(dq, t, j, d) += ds * attention_head(block.k, key, g, d);
      attention_head(block.dk, key, g, d) += ds * attention_head(f.q, t, j, d);
      attention_head(block.dv, key, g, d) += prob * attention_head(d_o, t, j, d);
    });
  };
  Matrix<double> dk, dv;
  if (exchange == KvExchange::all_gather) {
    std::vector<KvBlock> blocks = gather_blocks(f, seq, cp);
    Matrix<double> dk_all(f.k.rows() * cp.size(), f.k.cols()), dv_all(f.v.rows() * cp.size(), f.v.cols());
    for (size_t r = 0; r < blocks.size(); ++r) {
      blocks[r].dk = Matrix<double>::Zero(f.k.rows(), f.k.cols());
      blocks[r].dv = Matrix<double>::Zero(f.v.rows(), f.v.cols());
      backward_block(blocks[r]);
      dk_all.middleRows(static_cast<Eigen::Index>(r) * f.k.rows(), f.k.rows()) = blocks[r].dk;
      dv_all.middleRows(static_cast<Eigen::Index>(r) * f.v.rows(), f.v.rows()) = blocks[r].dv;
    }
    dk.resize(f.k.rows(), f.k.cols());
    dv.resize(f.v.rows(), f.v.cols());
    cp.reduce_scatter<double>(const_span_of(dk_all), span_of(dk), ReduceOp::sum);
    cp.reduce_scatter<double>(const_span_of(dv_all), span_of(dv), ReduceOp::sum);
  } else {
    KvBlock block{f.k, f.v, Matrix<double>::Zero(f.k.rows(), f.k.cols()), Matrix<double>::Zero(f.v.rows(), f.v.cols()),
                  f.positions};
    for (int step = 0; step < cp.size(); ++step) {  // cp passes: every block comes home with its gradients
      backward_block(block);
      if (cp.size() > 1) pass_on(block, cp, step, true, seq);
    }
    dk = std::move(block.dk);
    dv = std::move(block.dv);
  }
  projection_backward(c, p, x, row_positions(f.positions, x.rows(), batch), std::move(dq), std::move(dk), dv, grads);
  return grads;
}

}  // namespace moe::dist
