#include "distributed/kernels/grouped_swiglu.hpp"

#include "distributed/kernels/parallel_loop.hpp"

#include "reference/bf16.hpp"

#include <stdexcept>

namespace moe::kernels {
namespace {

std::vector<std::int64_t> group_starts(const std::vector<std::int64_t>& sizes, Eigen::Index rows) {
  std::vector<std::int64_t> start(sizes.size() + 1, 0);
  for (size_t i = 0; i < sizes.size(); ++i) start[i + 1] = start[i] + sizes[i];
  if (start.back() != rows) throw std::invalid_argument("grouped SwiGLU: group sizes must add up to the rows");
  return start;
}

// Multiply-adds below which the experts run on the calling thread: starting a team costs more than it saves, and
// with in-process ranks (threads already) every team of every rank wakes threads on the same cores.
constexpr double kParallelMacs = double(1 << 20);

// Multiply-adds of one row through one expert shard: fc1 and fc2.
template <typename T>
double macs_per_row(const ExpertShards<T>& w) {
  return w.fc1.empty() ? 0.0 : double(w.fc1[0].size() + w.fc2[0].size());
}

// body(e, begin, n) for every local expert e with n > 0 rows from row `begin`, experts in parallel when there is
// enough work: each writes only its own rows and its own weight gradients.
template <typename Body>
void for_each_group(const std::vector<std::int64_t>& sizes, Eigen::Index rows, double macs_per_row, Body&& body) {
  const auto start = group_starts(sizes, rows);
  const auto experts = static_cast<std::int64_t>(sizes.size());
  parallel_loop(experts, double(rows) * macs_per_row >= kParallelMacs, Schedule::dynamic, [&](std::int64_t e) {
    const auto ei = static_cast<size_t>(e);
    if (sizes[ei] > 0) body(ei, Eigen::Index(start[ei]), Eigen::Index(sizes[ei]));
  });
}

// The two halves of a block of pre-activations as the activation reads them, as expressions (no copies):
// body(gate, up, gate_pass, up_pass) with gate = min(g, L), up = clip(u, ±L) and the passes 1 strictly inside the
// clamp, 0 where it cut the value or the value met the limit (1 there with clamp_limit_passes; reference/swiglu.hpp);
// without a clamp the halves as they are and passes of 1 (multiplying by 1 is exact, so both paths round alike).
template <typename T, typename Pre, typename Body>
void with_activation_inputs(const Pre& pre, const SwigluOptions& o, Body&& body) {
  const auto d = pre.cols() / 2;
  const auto gate = pre.leftCols(d).array();
  const auto up = pre.rightCols(d).array();
  if (!o.clamp) {
    const auto ones = Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>::Ones(pre.rows(), d);
    body(gate, up, ones, ones);
    return;
  }
  const T L = static_cast<T>(*o.clamp);
  if (o.clamp_limit_passes)
    body(gate.min(L), up.max(-L).min(L), (gate <= L).template cast<T>(), (up >= -L && up <= L).template cast<T>());
  else
    body(gate.min(L), up.max(-L).min(L), (gate < L).template cast<T>(), (up > -L && up < L).template cast<T>());
}

}  // namespace

template <typename T>
GroupedSwigluForward<T> grouped_swiglu_forward(const Matrix<T>& x, const std::vector<std::int64_t>& group_sizes,
                                               const ExpertShards<T>& w, const Vector<T>& probs,
                                               const SwigluOptions& options) {
  const Eigen::Index d2 = w.fc1.empty() ? 0 : w.fc1.front().rows();
  GroupedSwigluForward<T> f{Matrix<T>::Zero(x.rows(), w.fc2.empty() ? x.cols() : w.fc2.front().rows()),
                            Matrix<T>(x.rows(), d2)};
  for_each_group(group_sizes, x.rows(), macs_per_row(w), [&](size_t ei, Eigen::Index begin, Eigen::Index n) {
    const auto p = probs.segment(begin, n).array();
    if (options.probs_on_input)
      f.pre.middleRows(begin, n).noalias() =
          (x.middleRows(begin, n).array().colwise() * p).matrix() * w.fc1[ei].transpose();
    else
      f.pre.middleRows(begin, n).noalias() = x.middleRows(begin, n) * w.fc1[ei].transpose();
    if (options.bf16) round_bf16_in_place(f.pre.middleRows(begin, n));
    Matrix<T> h(n, f.pre.cols() / 2);  // act = silu(gate)·up, in one pass over the block
    with_activation_inputs<T>(f.pre.middleRows(begin, n), options, [&](const auto& gate, const auto& up, auto, auto) {
      h.array() = gate * (T(1) / (T(1) + (-gate).exp())) * up;
    });
    if (!options.probs_on_input) h.array().colwise() *= p;
    h = stored(options.bf16, std::move(h));
    f.y.middleRows(begin, n).noalias() = h * w.fc2[ei].transpose();
  });
  return f;
}

template <typename T>
GroupedSwigluBackward<T> grouped_swiglu_backward(const Matrix<T>& x, const std::vector<std::int64_t>& group_sizes,
                                                 const ExpertShards<T>& w, const Vector<T>& probs,
                                                 const SwigluOptions& options, const Matrix<T>& pre,
                                                 const Matrix<T>& dy, ExpertShards<T>& grads) {
  GroupedSwigluBackward<T> b{Matrix<T>::Zero(x.rows(), x.cols()), Vector<T>::Zero(x.rows())};
  for_each_group(group_sizes, x.rows(), macs_per_row(w), [&](size_t ei, Eigen::Index begin, Eigen::Index n) {
    const auto p = probs.segment(begin, n).array();
    const auto d = pre.cols() / 2;
    // d L / d (what fc2 multiplies)
    const Matrix<T> g_h = stored(options.bf16, Matrix<T>(dy.middleRows(begin, n) * w.fc2[ei]));
    Matrix<T> g_act = g_h;
    if (!options.probs_on_input) g_act.array().colwise() *= p;
    // The activation recomputed from pre, and d L / d pre: silu'(g) = σ(g)·(1 + g·(1 − σ(g))).
    Matrix<T> act(n, d), g_pre(n, pre.cols());
    with_activation_inputs<T>(
        pre.middleRows(begin, n), options,
        [&](const auto& gate, const auto& up, const auto& gate_pass, const auto& up_pass) {
          const Eigen::Array<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor> sig = T(1) / (T(1) + (-gate).exp());
          act.array() = gate * sig * up;
          g_pre.leftCols(d).array() = gate_pass * g_act.array() * up * (sig * (T(1) + gate * (T(1) - sig)));
          g_pre.rightCols(d).array() = up_pass * g_act.array() * (gate * sig);
        });
    if (options.probs_on_input) {
      grads.fc2[ei].noalias() += dy.middleRows(begin, n).transpose() * stored(options.bf16, act);
    } else {
      grads.fc2[ei].noalias() +=
          dy.middleRows(begin, n).transpose() * stored(options.bf16, Matrix<T>(act.array().colwise() * p));
      b.dprob.segment(begin, n) = (act.array() * g_h.array()).rowwise().sum().matrix();
    }
    if (options.bf16) round_bf16_in_place(g_pre);
    if (options.probs_on_input) {
      const Matrix<T> g_in = g_pre * w.fc1[ei];
      const Matrix<T> in = (x.middleRows(begin, n).array().colwise() * p).matrix();
      grads.fc1[ei].noalias() += g_pre.transpose() * in;
      b.dprob.segment(begin, n) = (g_in.array() * x.middleRows(begin, n).array()).rowwise().sum().matrix();
      b.dx.middleRows(begin, n) = (g_in.array().colwise() * p).matrix();
    } else {
      grads.fc1[ei].noalias() += g_pre.transpose() * x.middleRows(begin, n);
      b.dx.middleRows(begin, n) = Matrix<T>(g_pre * w.fc1[ei]);  // via a fresh matrix: the GEMM's rounding then
                                                                  // cannot depend on where the rows sit in dx
    }
  });
  return b;
}

#define MOE_INSTANTIATE_GROUPED_SWIGLU(T)                                                                        \
  template GroupedSwigluForward<T> grouped_swiglu_forward<T>(const Matrix<T>&, const std::vector<std::int64_t>&, \
                                                             const ExpertShards<T>&, const Vector<T>&,          \
                                                             const SwigluOptions&);                             \
  template GroupedSwigluBackward<T> grouped_swiglu_backward<T>(                                                  \
      const Matrix<T>&, const std::vector<std::int64_t>&, const ExpertShards<T>&, const Vector<T>&,              \
      const SwigluOptions&, const Matrix<T>&, const Matrix<T>&, ExpertShards<T>&);
MOE_INSTANTIATE_GROUPED_SWIGLU(double)
MOE_INSTANTIATE_GROUPED_SWIGLU(float)

}  // namespace moe::kernels
