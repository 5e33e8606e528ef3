// Context-parallel attention (distributed/train/cp_attention.hpp) against the oracle's attention over whole
// sequences (reference/attention.hpp), for both KV exchanges. The data split is the oracle's
// (reference/global_step.hpp: context_parallel_positions), so a rank whose own idea of its positions differs from
// the rows it was given fails here.
//
// Compared on every rank: the outputs and input gradients of its rows; the weight gradients summed over cp. In half
// the cases under bf16 storage, with bf16 inputs and weights: then q, k, v, the context and their gradients are
// stored on both sides, the output and dx by the caller once whole (here: cp alone, so at once), and in double the
// two agree to double tolerance.
#include <rapidcheck.h>

#include <mutex>
#include <sstream>

#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/cp_attention.hpp"
#include "proptests/generators.hpp"
#include "proptests/property.hpp"
#include "reference/bf16.hpp"
#include "reference/global_step.hpp"
#include "reference/random_init.hpp"
#include "reference/tolerance.hpp"

namespace moe::proptest {
namespace {

std::string first_mismatch(const std::string& what, const Matrix<double>& got, const Matrix<double>& want,
                           const Tolerance& tol) {
  for (Eigen::Index i = 0; i < got.size(); ++i)
    if (!tol.admits(got.data()[i], want.data()[i])) {
      std::ostringstream s;
      s.precision(17);
      s << what << "[" << i << "]: " << got.data()[i] << " vs the oracle's " << want.data()[i];
      return s.str();
    }
  return {};
}

}  // namespace

MOE_PROPERTY(Attention, ContextParallelMatchesTheOracle, 200, ()) {
  const int cp = weighted<int>({{2, 1}, {3, 2}, {2, 4}});
  const auto exchange = weighted<dist::KvExchange>({{1, dist::KvExchange::all_gather}, {1, dist::KvExchange::p2p}});
  const int batch = weighted<int>({{2, 1}, {1, 2}});
  const int seq = 2 * cp * weighted<int>({{2, 1}, {1, 2}});
  const int groups = weighted<int>({{2, 1}, {1, 2}});
  const AttentionConfig c{.heads = groups * weighted<int>({{2, 1}, {1, 2}}),
                          .groups = groups,
                          .head_dim = weighted<int>({{1, 2}, {1, 4}}),
                          .rope_base = 10.0,
                          .bf16 = *rc::gen::arbitrary<bool>()};
  const int hidden = *rc::gen::inRange(2, 7);
  const auto seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
  RC_TAG(exchange == dist::KvExchange::p2p ? "p2p" : "all_gather", "cp " + std::to_string(cp),
         c.bf16 ? "bf16" : "double");

  SeededUniform rng(seed);
  const auto make = [&](Eigen::Index rows, Eigen::Index cols, double scale) {
    return stored(c.bf16, rng.matrix<double>(rows, cols, scale));
  };
  const AttentionParams params{make(c.heads * c.head_dim, hidden, 0.5), make(c.groups * c.head_dim, hidden, 0.5),
                               make(c.groups * c.head_dim, hidden, 0.5), make(hidden, c.heads * c.head_dim, 0.5)};
  const Matrix<double> x = make(seq * batch, hidden, 1.0);
  const Matrix<double> dout = make(seq * batch, hidden, 1.0);
  const AttentionForward want = attention_forward(c, params, x, batch);
  const AttentionGrads want_grads = attention_backward(c, params, x, batch, want, dout);
  const Tolerance tol = tolerance(Compared::training_step, Precision::float64);

  std::mutex mu;
  std::string failure;
  InprocWorld(cp).run([&](Communicator& group) {
    // The rows this rank is given, by the oracle's data split: position p of sequence b is global row p·batch + b.
    const std::vector<int> positions = context_parallel_positions(seq, cp, group.rank());
    const auto local = static_cast<Eigen::Index>(positions.size()) * batch;
    Matrix<double> x_local(local, hidden), dout_local(local, hidden), out_want(local, hidden), dx_want(local, hidden);
    for (size_t i = 0; i < positions.size(); ++i)
      for (int b = 0; b < batch; ++b) {
        const Eigen::Index row = static_cast<Eigen::Index>(i) * batch + b,
                           global = Eigen::Index{positions[i]} * batch + b;
        x_local.row(row) = x.row(global);
        dout_local.row(row) = dout.row(global);
        out_want.row(row) = want.out.row(global);
        dx_want.row(row) = want_grads.dx.row(global);
      }
    const auto f = dist::cp_attention_forward(c, params, x_local, batch, seq, group, exchange);
    AttentionGrads g = dist::cp_attention_backward(c, params, x_local, batch, seq, group, exchange, f, dout_local);
    // Whole on this rank (no TP): stored here, as the caller (AttentionRank) stores them after TP's reduction.
    std::string mine = first_mismatch("out", stored(c.bf16, f.out), out_want, tol);
    if (mine.empty()) mine = first_mismatch("dx", stored(c.bf16, g.dx), dx_want, tol);
    for (auto [w, name, oracle] :
         {std::tuple{&g.params.wq, "wq", &want_grads.params.wq}, std::tuple{&g.params.wk, "wk", &want_grads.params.wk},
          std::tuple{&g.params.wv, "wv", &want_grads.params.wv},
          std::tuple{&g.params.wo, "wo", &want_grads.params.wo}}) {
      group.allreduce<double>(std::span<double>(w->data(), static_cast<size_t>(w->size())), ReduceOp::sum);
      if (mine.empty()) mine = first_mismatch(std::string("d") + name + " (summed over cp)", *w, *oracle, tol);
    }
    if (!mine.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) failure = "cp rank " + std::to_string(group.rank()) + ": " + mine;
    }
  });
  if (!failure.empty())
    RC_FAIL(std::string(exchange == dist::KvExchange::p2p ? "p2p" : "all_gather") +
            " attention, cp=" + std::to_string(cp) + " seq=" + std::to_string(seq) + " batch=" + std::to_string(batch) +
            " H=" + std::to_string(c.heads) + " G=" + std::to_string(c.groups) + " d=" + std::to_string(c.head_dim) +
            ": " + failure);
}

}  // namespace moe::proptest
