#include "reference/model.hpp"

#include "reference/bf16.hpp"
#include "reference/random_init.hpp"
#include "reference/rms_norm.hpp"
#include "reference/score_functions.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace moe {
namespace {

void require(bool ok, const std::string& rule) {
  if (!ok) throw std::invalid_argument("invalid model: " + rule);
}

// Row t = s·batch + b of the [batch, seq] tables.
template <typename M>
auto at_row(const M& table, const TokenBatch& batch, Eigen::Index t) {
  return table(t % batch.batch, t / batch.batch);
}

void validate_batch(const ModelConfig& c, const TokenBatch& b) {
  require(b.seq > 0 && b.batch > 0, "seq and batch must be > 0");
  require(b.input_ids.rows() == b.batch && b.input_ids.cols() == b.seq, "input_ids must be [batch, seq]");
  require(b.labels.rows() == b.batch && b.labels.cols() == b.seq, "labels must be [batch, seq]");
  require(b.loss_mask.rows() == b.batch && b.loss_mask.cols() == b.seq, "loss_mask must be [batch, seq]");
  for (Eigen::Index i = 0; i < b.input_ids.size(); ++i) {
    require(b.input_ids.data()[i] >= 0 && b.input_ids.data()[i] < c.vocab, "input ids must be in [0, vocab)");
    require(b.labels.data()[i] >= 0 && b.labels.data()[i] < c.vocab, "labels must be in [0, vocab)");
  }
}

template <typename T>
void validate_params(const ModelConfig& c, const ModelParams<T>& p) {
  const int h = c.layer.hidden;
  require(p.embedding.rows() == c.vocab && p.embedding.cols() == h, "embedding must be [vocab, hidden]");
  require(p.head.rows() == c.vocab && p.head.cols() == h, "head must be [vocab, hidden]");
  require(p.final_norm.size() == h, "final_norm must have hidden entries");
  const auto blocks = static_cast<size_t>(c.num_blocks());
  require(p.block_norm.size() == blocks && p.layers.size() == blocks,
          "block_norm and layers must have one entry per block (the layers, then the MTP depths)");
  for (const auto& w : p.block_norm) require(w.size() == h, "every block_norm must have hidden entries");
  const size_t with_attention = c.has_attention() ? blocks : 0;
  require(p.attention.size() == with_attention && p.attention_norm.size() == with_attention,
          "attention and attention_norm must have one entry per block with attention, none without");
  for (const auto& w : p.attention_norm) require(w.size() == h, "every attention_norm must have hidden entries");
  require(p.mtp.size() == static_cast<size_t>(c.mtp_depth), "mtp must have one entry per MTP depth");
  for (const auto& m : p.mtp)
    require(m.enorm.size() == h && m.hnorm.size() == h && m.final_norm.size() == h && m.eh_proj.rows() == h &&
                m.eh_proj.cols() == 2 * h,
            "an MTP depth's norms must have hidden entries and its eh_proj be [hidden, 2·hidden]");
}

// RMSNorm of every row.
template <typename T>
Matrix<T> norm_rows(const Matrix<T>& x, const Vector<T>& w, double eps) {
  Matrix<T> out(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) out.row(t) = rms_norm<T>(x.row(t), w, eps);
  return out;
}

// dx of y = RMSNorm(x; w) for every row, w's gradient accumulated into gw.
template <typename T>
Matrix<T> norm_rows_backward(const Matrix<T>& x, const Vector<T>& w, double eps, const Matrix<T>& dy, Vector<T>& gw) {
  Matrix<T> dx(x.rows(), x.cols());
  for (Eigen::Index t = 0; t < x.rows(); ++t) dx.row(t) = rms_norm_backward<T>(x.row(t), w, eps, dy.row(t), gw);
  return dx;
}

}  // namespace

std::int64_t TokenBatch::valid_tokens() const { return loss_mask.cast<std::int64_t>().sum(); }

std::int64_t TokenBatch::router_tokens(const Semantics& semantics) const {
  return semantics.has(Deviation::router_counts_padding) ? tokens() : valid_tokens();
}

void ModelConfig::validate() const {
  layer.validate();
  require(num_layers > 0, "num_layers must be > 0");
  require(n_hash_layers >= 0 && n_hash_layers <= num_layers, "n_hash_layers must be in [0, num_layers]");
  require(vocab > 0, "vocab must be > 0");
  require(rms_eps > 0, "rms_eps must be > 0");
  if (has_attention()) attention.validate();
  require(mtp_depth >= 0, "mtp_depth must be >= 0");
  require(std::isfinite(mtp_loss_scale) && mtp_loss_scale >= 0, "mtp_loss_scale must be finite and >= 0");
  for (int l = 0; l < n_hash_layers; ++l) layer_config(l).validate();
}

std::string ModelConfig::block_prefix(int block) const {
  return block < num_layers ? "layer" + std::to_string(block) + "." : "mtp" + std::to_string(block - num_layers) + ".";
}

ModelConfig ModelConfig::in_mode(LossMode mode) const {
  ModelConfig c = *this;
  c.layer.semantics = layer.semantics.in_mode(mode);
  return c;
}

MoeConfig ModelConfig::layer_config(int l) const {
  MoeConfig c = layer;
  if (l < n_hash_layers) {
    c.hash_routing = true;
    c.expert_bias = false;
    c.bias_update_rate.reset();
    c.num_groups = c.group_topk = 0;
  }
  return c;
}

namespace {

// Block l on its input x: m = x + Attn(RMSNorm(x; a_l)) with attention (else m = x), then m + MoE(RMSNorm(m; w_l)),
// the MoE seeing `batch`'s ids and partition and the padding mask `padding`. Appends the block's state to f and
// returns its output.
template <typename T>
Matrix<T> block_forward(const ModelConfig& config, const ModelParams<T>& params, int l, const Matrix<T>& x,
                        const TokenBatch& batch, const std::vector<bool>& padding,
                        const std::vector<GlobalAuxState>& global_aux,
                        const std::vector<GlobalAuxGroup>& global_aux_group, ModelForward<T>& f) {
  const auto li = static_cast<size_t>(l);
  if (config.has_attention()) {
    const bool bf16 = config.layer.bf16_storage;
    f.attention_in.push_back(stored(bf16, norm_rows<T>(x, params.attention_norm[li], config.rms_eps)));
    f.attention.push_back(attention_forward(config.attention_config(), params.attention[li], f.attention_in.back(),
                                            batch.batch));
    f.mid.push_back(stored(bf16, Matrix<T>(x + f.attention.back().out)));
  }
  const Matrix<T>& residual = config.has_attention() ? f.mid.back() : x;
  const MoeConfig lc = config.layer_config(l);
  MoeInputs<T> in;
  in.seq = batch.seq;
  in.batch = batch.batch;
  in.x = stored(lc.bf16_storage, norm_rows<T>(residual, params.block_norm[li], config.rms_eps));
  if (lc.hash_routing) in.input_ids = batch.input_ids;
  if (!config.semantics().has(Deviation::router_counts_padding)) in.padding_mask = padding;
  in.partition = batch.partition;
  if (!global_aux.empty()) in.global_aux = global_aux[li];
  if (!global_aux_group.empty()) in.global_aux_group = global_aux_group[li];
  f.layers.push_back(moe_forward(lc, params.layers[li], in));
  f.layer_inputs.push_back(std::move(in));
  f.aux_sum += f.layers.back().aux_loss;
  f.z_sum += f.layers.back().z_loss;
  return stored(lc.bf16_storage, Matrix<T>(residual + f.layers.back().y));
}

// dx of block l (input x) from the gradient dout of its output; its parameters' gradients into g.
template <typename T>
Matrix<T> block_backward(const ModelConfig& config, const ModelParams<T>& params, int l, const Matrix<T>& x,
                         const ModelForward<T>& f, const Matrix<T>& dout, const LossScales& scales, int batch,
                         ModelParams<T>& g) {
  const auto li = static_cast<size_t>(l);
  MoeGradients<T> lg = moe_backward(config.layer_config(l), params.layers[li], f.layer_inputs[li], f.layers[li],
                                    dout, scales);
  const Matrix<T>& residual = config.has_attention() ? f.mid[li] : x;
  Matrix<T> dx = stored(config.layer.bf16_storage,
                        Matrix<T>(dout + norm_rows_backward<T>(residual, params.block_norm[li], config.rms_eps, lg.x,
                                                               g.block_norm[li])));
  g.layers[li] = std::move(lg.params);
  if (config.has_attention()) {
    AttentionGrads ag = attention_backward(config.attention_config(), params.attention[li], f.attention_in[li], batch,
                                           f.attention[li], dx);
    dx += norm_rows_backward<T>(x, params.attention_norm[li], config.rms_eps, ag.dx, g.attention_norm[li]);
    dx = stored(config.layer.bf16_storage, std::move(dx));
    g.attention[li] = std::move(ag.params);
  }
  return dx;
}

// CE of every row against `batch`'s labels where its mask holds (0 elsewhere), and the sum.
template <typename T>
Vector<T> cross_entropy_rows(const Matrix<T>& logits, const TokenBatch& batch, T& sum) {
  Vector<T> ce = Vector<T>::Zero(logits.rows());
  for (Eigen::Index t = 0; t < logits.rows(); ++t) {
    if (!batch.valid(t)) continue;
    const RowVector<T> z = logits.row(t);
    ce(t) = logsumexp<T>(z) - z(at_row(batch.labels, batch, t));
    sum += ce(t);
  }
  return ce;
}

// d(Σ_t w_t·CE_t)/d logits: (softmax − onehot(label))·w_t on the rows the mask keeps.
template <typename T>
Matrix<T> cross_entropy_backward(const Matrix<T>& logits, const TokenBatch& batch, double weight,
                                 const std::vector<double>& row_weights) {
  require(row_weights.empty() || static_cast<Eigen::Index>(row_weights.size()) == logits.rows(),
          "row weights must have one weight per row");
  Matrix<T> grad = Matrix<T>::Zero(logits.rows(), logits.cols());
  for (Eigen::Index t = 0; t < logits.rows(); ++t) {
    if (!batch.valid(t)) continue;
    grad.row(t) = softmax<T>(logits.row(t));
    grad(t, at_row(batch.labels, batch, t)) -= T(1);
    grad.row(t) *= static_cast<T>(row_weights.empty() ? weight : row_weights[static_cast<size_t>(t)]);
  }
  return grad;
}

std::vector<bool> padding_of(const TokenBatch& batch) {
  std::vector<bool> padding(static_cast<size_t>(batch.tokens()));
  for (Eigen::Index t = 0; t < batch.tokens(); ++t) padding[static_cast<size_t>(t)] = !batch.valid(t);
  return padding;
}

}  // namespace

TokenBatch rolled_batch(const TokenBatch& b, int k) {
  require(k >= 0, "the roll must be >= 0");
  TokenBatch r = b;
  r.input_ids.setZero();
  r.labels.setZero();
  r.loss_mask.setConstant(false);
  const int keep = std::max(b.seq - k, 0);
  r.input_ids.leftCols(keep) = b.input_ids.rightCols(keep);
  r.labels.leftCols(keep) = b.labels.rightCols(keep);
  r.loss_mask.leftCols(keep) = b.loss_mask.rightCols(keep);
  return r;
}

template <typename T>
ModelForward<T> model_forward(const ModelConfig& config, const ModelParams<T>& params, const TokenBatch& batch,
                              const std::vector<GlobalAuxState>& global_aux,
                              const std::vector<GlobalAuxGroup>& global_aux_group) {
  config.validate();
  validate_params(config, params);
  validate_batch(config, batch);
  require(global_aux.empty() || static_cast<int>(global_aux.size()) == config.num_blocks(),
          "global_aux must be empty or have one state per block");
  require(global_aux_group.empty() || static_cast<int>(global_aux_group.size()) == config.num_blocks(),
          "global_aux_group must be empty or have one entry per block");
  const Eigen::Index tokens = batch.tokens();

  ModelForward<T> f;
  Matrix<T> h(tokens, config.layer.hidden);
  for (Eigen::Index t = 0; t < tokens; ++t) h.row(t) = params.embedding.row(at_row(batch.input_ids, batch, t));
  f.hidden.push_back(h);
  const std::vector<bool> padding = padding_of(batch);
  for (int l = 0; l < config.num_layers; ++l)
    f.hidden.push_back(block_forward(config, params, l, f.hidden.back(), batch, padding, global_aux,
                                     global_aux_group, f));
  const bool bf16 = config.layer.bf16_storage;
  f.normed = stored(bf16, norm_rows<T>(f.hidden.back(), params.final_norm, config.rms_eps));
  f.logits = stored(bf16, Matrix<T>(f.normed * params.head.transpose()));
  f.ce_rows = cross_entropy_rows<T>(f.logits, batch, f.ce_sum);

  for (int k = 1; k <= config.mtp_depth; ++k) {
    const MtpParams<T>& p = params.mtp[static_cast<size_t>(k - 1)];
    MtpForward<T> m;
    m.batch = rolled_batch(batch, k);
    m.e.resize(tokens, config.layer.hidden);
    for (Eigen::Index t = 0; t < tokens; ++t) m.e.row(t) = params.embedding.row(at_row(m.batch.input_ids, m.batch, t));
    m.en = stored(bf16, norm_rows<T>(m.e, p.enorm, config.rms_eps));
    m.hn = stored(bf16, norm_rows<T>(k == 1 ? f.normed : f.mtp.back().normed, p.hnorm, config.rms_eps));
    Matrix<T> both(tokens, 2 * config.layer.hidden);
    both << m.en, m.hn;
    m.u = stored(bf16, Matrix<T>(both * p.eh_proj.transpose()));
    m.out = block_forward(config, params, config.num_layers + k - 1, m.u, m.batch, padding_of(m.batch), global_aux,
                          global_aux_group, f);
    m.normed = stored(bf16, norm_rows<T>(m.out, p.final_norm, config.rms_eps));
    m.logits = stored(bf16, Matrix<T>(m.normed * params.head.transpose()));
    m.ce_rows = cross_entropy_rows<T>(m.logits, m.batch, m.ce_sum);
    f.mtp.push_back(std::move(m));
  }
  return f;
}

template <typename T>
ModelParams<T> model_backward(const ModelConfig& config, const ModelParams<T>& params, const TokenBatch& batch,
                              const ModelForward<T>& forward, const ModelLossWeights& weights) {
  const int h = config.layer.hidden;
  const auto blocks = static_cast<size_t>(config.num_blocks());
  const auto depth = static_cast<size_t>(config.mtp_depth);
  require(weights.mtp.empty() || weights.mtp.size() == depth, "mtp weights must be empty or one per depth");
  require(weights.mtp_rows.empty() || weights.mtp_rows.size() == depth, "mtp_rows must be empty or one per depth");
  ModelParams<T> g;
  g.embedding = Matrix<T>::Zero(params.embedding.rows(), h);
  g.head = Matrix<T>::Zero(params.head.rows(), h);
  g.final_norm = Vector<T>::Zero(h);
  g.block_norm.assign(blocks, Vector<T>::Zero(h));
  g.layers.resize(blocks);
  if (config.has_attention()) {
    g.attention_norm.assign(blocks, Vector<T>::Zero(h));
    g.attention.resize(blocks);
  }
  for (size_t k = 0; k < depth; ++k)
    g.mtp.push_back({Vector<T>::Zero(h), Vector<T>::Zero(h), Matrix<T>::Zero(h, 2 * h), Vector<T>::Zero(h)});
  const LossScales scales{weights.aux, weights.z, weights.aux_rows};
  const bool bf16 = config.layer.bf16_storage;

  // MTP depths last to first: dfᵏ comes from depth k's CE and from depth k + 1's hnorm input; df⁰ joins the main
  // CE's gradient at the final norm's output.
  Matrix<T> grad_normed = Matrix<T>::Zero(forward.normed.rows(), h);
  for (size_t k = depth; k-- > 0;) {
    const MtpForward<T>& m = forward.mtp[k];
    const MtpParams<T>& p = params.mtp[k];
    MtpParams<T>& gp = g.mtp[k];
    const double w = weights.mtp.empty() ? weights.ce * config.mtp_loss_scale / config.mtp_depth : weights.mtp[k];
    const Matrix<T> grad_logits = stored(
        bf16, cross_entropy_backward<T>(m.logits, m.batch, w,
                                        weights.mtp_rows.empty() ? std::vector<double>{} : weights.mtp_rows[k]));
    g.head += grad_logits.transpose() * m.normed;
    const Matrix<T> grad_f = grad_normed + grad_logits * params.head;
    const Matrix<T> grad_out =
        stored(bf16, norm_rows_backward<T>(m.out, p.final_norm, config.rms_eps, grad_f, gp.final_norm));
    const Matrix<T> grad_u = block_backward(config, params, config.num_layers + static_cast<int>(k), m.u, forward,
                                            grad_out, scales, batch.batch, g);
    Matrix<T> both(m.u.rows(), 2 * h);
    both << m.en, m.hn;
    gp.eh_proj += grad_u.transpose() * both;
    const Matrix<T> grad_both = stored(bf16, Matrix<T>(grad_u * p.eh_proj));
    const Matrix<T> grad_e =
        stored(bf16, norm_rows_backward<T>(m.e, p.enorm, config.rms_eps, grad_both.leftCols(h), gp.enorm));
    for (Eigen::Index t = 0; t < grad_e.rows(); ++t) g.embedding.row(at_row(m.batch.input_ids, m.batch, t)) += grad_e.row(t);
    const Matrix<T>& previous = k == 0 ? forward.normed : forward.mtp[k - 1].normed;
    grad_normed = stored(bf16, norm_rows_backward<T>(previous, p.hnorm, config.rms_eps, grad_both.rightCols(h),
                                                     gp.hnorm));
  }

  // The main CE: d CE_t / d logits_t = softmax(logits_t) − onehot(label_t), valid tokens only.
  const Matrix<T> grad_logits =
      stored(bf16, cross_entropy_backward<T>(forward.logits, batch, weights.ce, weights.ce_rows));
  g.head += grad_logits.transpose() * forward.normed;
  grad_normed += grad_logits * params.head;
  Matrix<T> grad_h = stored(bf16, norm_rows_backward<T>(forward.hidden.back(), params.final_norm, config.rms_eps,
                                                        grad_normed, g.final_norm));

  // Blocks in reverse: hˡ⁺¹ = mˡ + MoE(RMSNorm(mˡ)), so dmˡ = dhˡ⁺¹ + RMSNorm'ᵀ·(dx of the layer); then the same
  // through mˡ = hˡ + Attn(RMSNorm(hˡ)) with attention (else mˡ = hˡ).
  for (int l = config.num_layers - 1; l >= 0; --l)
    grad_h = block_backward(config, params, l, forward.hidden[static_cast<size_t>(l)], forward, grad_h, scales,
                            batch.batch, g);

  for (Eigen::Index t = 0; t < batch.tokens(); ++t) g.embedding.row(at_row(batch.input_ids, batch, t)) += grad_h.row(t);
  return g;
}

template <typename T>
std::vector<TensorView<T>> trained_tensors(const ModelConfig& config, ModelParams<T>& p) {
  std::vector<TensorView<T>> views;
  auto add = [&views](std::string name, auto& m) {
    if (m.size() == 0) return;
    std::vector<Eigen::Index> shape{m.rows(), m.cols()};
    if constexpr (std::remove_reference_t<decltype(m)>::ColsAtCompileTime == 1) shape = {m.size()};
    views.push_back({std::move(name), m.data(), m.size(), std::move(shape)});
  };
  add("embedding", p.embedding);
  for (int l = 0; l < config.num_blocks(); ++l) {
    const auto li = static_cast<size_t>(l);
    const std::string pre = config.block_prefix(l);
    MoeParams<T>& layer = p.layers[li];
    if (l >= config.num_layers) {
      MtpParams<T>& m = p.mtp[li - static_cast<size_t>(config.num_layers)];
      add(pre + "enorm", m.enorm);
      add(pre + "hnorm", m.hnorm);
      add(pre + "eh_proj", m.eh_proj);
    }
    if (config.has_attention()) {
      AttentionWeights<T>& a = p.attention[li];
      add(pre + "attention_norm", p.attention_norm[li]);
      add(pre + "attention_wq", a.wq);
      add(pre + "attention_wk", a.wk);
      add(pre + "attention_wv", a.wv);
      add(pre + "attention_wo", a.wo);
    }
    add(pre + "block_norm", p.block_norm[li]);
    add(pre + "router_weight", layer.router_weight);
    for (size_t e = 0; e < layer.expert_fc1.size(); ++e) {
      add(pre + "expert_fc1[" + std::to_string(e) + "]", layer.expert_fc1[e]);
      add(pre + "expert_fc2[" + std::to_string(e) + "]", layer.expert_fc2[e]);
    }
    add(pre + "shared_fc1", layer.shared_fc1);
    add(pre + "shared_fc2", layer.shared_fc2);
    add(pre + "shared_gate", layer.shared_gate);
    add(pre + "latent_down", layer.latent_down);
    add(pre + "latent_up", layer.latent_up);
    if (l >= config.num_layers) add(pre + "final_norm", p.mtp[li - static_cast<size_t>(config.num_layers)].final_norm);
  }
  add("final_norm", p.final_norm);
  add("head", p.head);
  return views;
}

template <typename T>
ModelParams<T> random_model_params(const ModelConfig& config, std::uint64_t seed) {
  config.validate();
  const int h = config.layer.hidden;
  ModelParams<T> p;
  SeededUniform rng(seed);
  p.embedding = rng.matrix<T>(config.vocab, h, 1.0);
  p.head = rng.matrix<T>(config.vocab, h, 1.0 / std::sqrt(static_cast<double>(h)));
  p.final_norm = Vector<T>::Ones(h) + rng.matrix<T>(h, 1, 0.1);
  for (int l = 0; l < config.num_layers; ++l) {
    p.block_norm.push_back(Vector<T>::Ones(h) + rng.matrix<T>(h, 1, 0.1));
    p.layers.push_back(random_params<T>(config.layer_config(l), config.vocab, rng.bits()));
  }
  // Drawn after everything else, so a model without attention keeps the parameters its seed always gave.
  const auto add_attention = [&] {
    const AttentionConfig& a = config.attention;
    const int qd = a.heads * a.head_dim, kd = a.groups * a.head_dim;
    const double in_scale = 1.0 / std::sqrt(static_cast<double>(h)), out_scale = 1.0 / std::sqrt(double(qd));
    p.attention_norm.push_back(Vector<T>::Ones(h) + rng.matrix<T>(h, 1, 0.1));
    p.attention.push_back({rng.matrix<T>(qd, h, in_scale), rng.matrix<T>(kd, h, in_scale),
                           rng.matrix<T>(kd, h, in_scale), rng.matrix<T>(h, qd, out_scale)});
  };
  if (config.has_attention())
    for (int l = 0; l < config.num_layers; ++l) add_attention();
  // The MTP depths after everything else, their blocks then their own tensors.
  for (int l = config.num_layers; l < config.num_blocks(); ++l) {
    p.block_norm.push_back(Vector<T>::Ones(h) + rng.matrix<T>(h, 1, 0.1));
    p.layers.push_back(random_params<T>(config.layer_config(l), config.vocab, rng.bits()));
    if (config.has_attention()) add_attention();
    p.mtp.push_back({Vector<T>::Ones(h) + rng.matrix<T>(h, 1, 0.1), Vector<T>::Ones(h) + rng.matrix<T>(h, 1, 0.1),
                     rng.matrix<T>(h, 2 * h, 1.0 / std::sqrt(2.0 * h)), Vector<T>::Ones(h) + rng.matrix<T>(h, 1, 0.1)});
  }
  return p;
}

TokenBatch random_token_batch(const ModelConfig& config, int seq, int batch, std::uint64_t seed) {
  SeededUniform rng(seed);
  TokenBatch b;
  b.seq = seq;
  b.batch = batch;
  b.input_ids.resize(batch, seq);
  b.labels.resize(batch, seq);
  for (Eigen::Index i = 0; i < b.input_ids.size(); ++i) {
    b.input_ids.data()[i] = static_cast<std::int64_t>(rng.bits() % static_cast<std::uint64_t>(config.vocab));
    b.labels.data()[i] = static_cast<std::int64_t>(rng.bits() % static_cast<std::uint64_t>(config.vocab));
  }
  if (config.vocab >= b.input_ids.size()) {
    // Distinct input ids where the vocabulary allows (a shuffled prefix of 0..vocab−1). The model has no token
    // mixing, so two equal ids would give two bitwise equal rows and exactly tied router scores; capacity dropping
    // by probability then keeps whichever the tie-break prefers, and a parallel system reproduces that only if its
    // GEMMs round a row the same wherever it sits in a batch (batch invariance), which vectorised FMA kernels do
    // not. A tie is a property of toy data, not of the system under test.
    std::vector<std::int64_t> ids(static_cast<size_t>(config.vocab));
    std::iota(ids.begin(), ids.end(), std::int64_t{0});
    for (Eigen::Index i = 0; i < b.input_ids.size(); ++i) {
      const auto j = static_cast<size_t>(i) + static_cast<size_t>(rng.bits() % (ids.size() - static_cast<size_t>(i)));
      std::swap(ids[static_cast<size_t>(i)], ids[j]);
      b.input_ids.data()[i] = ids[static_cast<size_t>(i)];
    }
  }
  b.loss_mask = BoolMatrix::Constant(batch, seq, true);
  return b;
}

template ModelForward<double> model_forward<double>(const ModelConfig&, const ModelParams<double>&, const TokenBatch&,
                                                    const std::vector<GlobalAuxState>&,
                                                    const std::vector<GlobalAuxGroup>&);
template std::vector<TensorView<double>> trained_tensors<double>(const ModelConfig&, ModelParams<double>&);

ModelParams<double> bf16_weights(const ModelConfig& config, ModelParams<double> main) {
  for (const TensorView<double>& t : trained_tensors(config, main))
    for (Eigen::Index i = 0; i < t.size; ++i) t.data[i] = round_bf16(t.data[i]);
  return main;
}
template ModelParams<double> model_backward<double>(const ModelConfig&, const ModelParams<double>&, const TokenBatch&,
                                                    const ModelForward<double>&, const ModelLossWeights&);
template ModelParams<double> random_model_params<double>(const ModelConfig&, std::uint64_t);

}  // namespace moe
