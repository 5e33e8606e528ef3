#include "reference/model.hpp"

#include "reference/random_init.hpp"
#include "reference/rms_norm.hpp"
#include "reference/score_functions.hpp"

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
  require(static_cast<int>(p.block_norm.size()) == c.num_layers && static_cast<int>(p.layers.size()) == c.num_layers,
          "block_norm and layers must have one entry per layer");
  for (const auto& w : p.block_norm) require(w.size() == h, "every block_norm must have hidden entries");
  const size_t with_attention = c.has_attention() ? static_cast<size_t>(c.num_layers) : 0;
  require(p.attention.size() == with_attention && p.attention_norm.size() == with_attention,
          "attention and attention_norm must have one entry per layer with attention, none without");
  for (const auto& w : p.attention_norm) require(w.size() == h, "every attention_norm must have hidden entries");
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
  for (int l = 0; l < n_hash_layers; ++l) layer_config(l).validate();
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

template <typename T>
ModelForward<T> model_forward(const ModelConfig& config, const ModelParams<T>& params, const TokenBatch& batch,
                              const std::vector<GlobalAuxState>& global_aux,
                              const std::vector<GlobalAuxGroup>& global_aux_group) {
  config.validate();
  validate_params(config, params);
  validate_batch(config, batch);
  require(global_aux.empty() || static_cast<int>(global_aux.size()) == config.num_layers,
          "global_aux must be empty or have one state per layer");
  require(global_aux_group.empty() || static_cast<int>(global_aux_group.size()) == config.num_layers,
          "global_aux_group must be empty or have one entry per layer");
  const Eigen::Index tokens = batch.tokens();

  ModelForward<T> f;
  Matrix<T> h(tokens, config.layer.hidden);
  for (Eigen::Index t = 0; t < tokens; ++t) h.row(t) = params.embedding.row(at_row(batch.input_ids, batch, t));
  f.hidden.push_back(h);

  std::vector<bool> padding(static_cast<size_t>(tokens));
  for (Eigen::Index t = 0; t < tokens; ++t) padding[static_cast<size_t>(t)] = !at_row(batch.loss_mask, batch, t);

  for (int l = 0; l < config.num_layers; ++l) {
    const auto li = static_cast<size_t>(l);
    if (config.has_attention()) {
      f.attention_in.push_back(norm_rows<T>(f.hidden.back(), params.attention_norm[li], config.rms_eps));
      f.attention.push_back(attention_forward(config.attention, params.attention[li], f.attention_in.back(),
                                              batch.batch));
      f.mid.push_back(f.hidden.back() + f.attention.back().out);
    }
    const Matrix<T>& residual = config.has_attention() ? f.mid.back() : f.hidden.back();
    const MoeConfig lc = config.layer_config(l);
    MoeInputs<T> in;
    in.seq = batch.seq;
    in.batch = batch.batch;
    in.x = norm_rows<T>(residual, params.block_norm[li], config.rms_eps);
    if (lc.hash_routing) in.input_ids = batch.input_ids;
    if (!config.semantics().has(Deviation::router_counts_padding)) in.padding_mask = padding;
    in.partition = batch.partition;
    if (!global_aux.empty()) in.global_aux = global_aux[static_cast<size_t>(l)];
    if (!global_aux_group.empty()) in.global_aux_group = global_aux_group[static_cast<size_t>(l)];
    f.layers.push_back(moe_forward(lc, params.layers[static_cast<size_t>(l)], in));
    f.layer_inputs.push_back(std::move(in));
    f.hidden.push_back(residual + f.layers.back().y);
    f.aux_sum += f.layers.back().aux_loss;
    f.z_sum += f.layers.back().z_loss;
  }

  f.logits = norm_rows<T>(f.hidden.back(), params.final_norm, config.rms_eps) * params.head.transpose();
  f.ce_rows = Vector<T>::Zero(tokens);
  for (Eigen::Index t = 0; t < tokens; ++t) {
    if (padding[static_cast<size_t>(t)]) continue;
    const RowVector<T> z = f.logits.row(t);
    f.ce_rows(t) = logsumexp<T>(z) - z(at_row(batch.labels, batch, t));
    f.ce_sum += f.ce_rows(t);
  }
  return f;
}

template <typename T>
ModelParams<T> model_backward(const ModelConfig& config, const ModelParams<T>& params, const TokenBatch& batch,
                              const ModelForward<T>& forward, const ModelLossWeights& weights) {
  const Eigen::Index tokens = batch.tokens();
  const int h = config.layer.hidden;
  ModelParams<T> g;
  g.embedding = Matrix<T>::Zero(params.embedding.rows(), h);
  g.head = Matrix<T>::Zero(params.head.rows(), h);
  g.final_norm = Vector<T>::Zero(h);
  g.block_norm.assign(static_cast<size_t>(config.num_layers), Vector<T>::Zero(h));
  g.layers.resize(static_cast<size_t>(config.num_layers));
  if (config.has_attention()) {
    g.attention_norm.assign(static_cast<size_t>(config.num_layers), Vector<T>::Zero(h));
    g.attention.resize(static_cast<size_t>(config.num_layers));
  }

  // Cross-entropy: d CE_t / d logits_t = softmax(logits_t) − onehot(label_t), valid tokens only.
  Matrix<T> grad_logits = Matrix<T>::Zero(tokens, params.head.rows());
  for (Eigen::Index t = 0; t < tokens; ++t) {
    if (!at_row(batch.loss_mask, batch, t)) continue;
    grad_logits.row(t) = softmax<T>(forward.logits.row(t));
    grad_logits(t, at_row(batch.labels, batch, t)) -= T(1);
  }
  if (weights.ce_rows.empty()) {
    grad_logits *= static_cast<T>(weights.ce);
  } else {
    require(static_cast<Eigen::Index>(weights.ce_rows.size()) == tokens, "ce_rows must have one weight per row");
    for (Eigen::Index t = 0; t < tokens; ++t) grad_logits.row(t) *= static_cast<T>(weights.ce_rows[static_cast<size_t>(t)]);
  }

  g.head = grad_logits.transpose() * norm_rows<T>(forward.hidden.back(), params.final_norm, config.rms_eps);
  Matrix<T> grad_h = norm_rows_backward<T>(forward.hidden.back(), params.final_norm, config.rms_eps,
                                           grad_logits * params.head, g.final_norm);

  // Blocks in reverse: hˡ⁺¹ = mˡ + MoE(RMSNorm(mˡ)), so dmˡ = dhˡ⁺¹ + RMSNorm'ᵀ·(dx of the layer); then the same
  // through mˡ = hˡ + Attn(RMSNorm(hˡ)) with attention (else mˡ = hˡ).
  const LossScales scales{weights.aux, weights.z, weights.aux_rows};
  for (int l = config.num_layers - 1; l >= 0; --l) {
    const auto li = static_cast<size_t>(l);
    MoeGradients<T> lg = moe_backward(config.layer_config(l), params.layers[li], forward.layer_inputs[li],
                                      forward.layers[li], grad_h, scales);
    const Matrix<T>& residual = config.has_attention() ? forward.mid[li] : forward.hidden[li];
    grad_h += norm_rows_backward<T>(residual, params.block_norm[li], config.rms_eps, lg.x, g.block_norm[li]);
    g.layers[li] = std::move(lg.params);
    if (config.has_attention()) {
      AttentionGrads ag = attention_backward(config.attention, params.attention[li], forward.attention_in[li],
                                             batch.batch, forward.attention[li], grad_h);
      grad_h += norm_rows_backward<T>(forward.hidden[li], params.attention_norm[li], config.rms_eps, ag.dx,
                                      g.attention_norm[li]);
      g.attention[li] = std::move(ag.params);
    }
  }

  for (Eigen::Index t = 0; t < tokens; ++t) g.embedding.row(at_row(batch.input_ids, batch, t)) += grad_h.row(t);
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
  for (int l = 0; l < config.num_layers; ++l) {
    const auto li = static_cast<size_t>(l);
    const std::string pre = "layer" + std::to_string(l) + ".";
    MoeParams<T>& layer = p.layers[li];
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
  if (config.has_attention()) {
    const AttentionConfig& a = config.attention;
    const int qd = a.heads * a.head_dim, kd = a.groups * a.head_dim;
    const double in_scale = 1.0 / std::sqrt(static_cast<double>(h)), out_scale = 1.0 / std::sqrt(double(qd));
    for (int l = 0; l < config.num_layers; ++l) {
      p.attention_norm.push_back(Vector<T>::Ones(h) + rng.matrix<T>(h, 1, 0.1));
      p.attention.push_back({rng.matrix<T>(qd, h, in_scale), rng.matrix<T>(kd, h, in_scale),
                             rng.matrix<T>(kd, h, in_scale), rng.matrix<T>(h, qd, out_scale)});
    }
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
template ModelParams<double> model_backward<double>(const ModelConfig&, const ModelParams<double>&, const TokenBatch&,
                                                    const ModelForward<double>&, const ModelLossWeights&);
template ModelParams<double> random_model_params<double>(const ModelConfig&, std::uint64_t);

}  // namespace moe
