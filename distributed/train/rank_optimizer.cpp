#include "distributed/train/rank_optimizer.hpp"

#include "distributed/comm/row_collectives.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moe::dist {

RankOptimizer::RankOptimizer(const ModelConfig& config, const OptimizerSettings& settings, const ProcessGroups& groups,
                             const RankGroups& comms, ModelShard<double>& params, LossMode mode)
    : settings_(settings),
      params_(params),
      plan_(groups, comms, mode, config.semantics(), settings.distributed),
      tp_(comms.tp.get()),
      pp_(comms.pp.get()),
      ep_(comms.ep.get()),
      expt_tp_(comms.expt_tp.get()) {
  const bool gtp = groups.layout().gtp > 1 || groups.layout().egtp > 1;
  if (settings.distributed && gtp)
    throw std::invalid_argument("distributed optimizer: GTP axes are not modelled (drop --distributed-optimizer)");
  if (settings.config.kind == OptimizerKind::muon && gtp)
    throw std::invalid_argument("Muon with GTP axes is not modelled: Newton-Schulz needs whole matrices that GTP "
                                "keeps as shards");
  if (settings.config.kind == OptimizerKind::muon) {
    if (settings.distributed)
      throw std::invalid_argument("Muon runs with DDP: the distributed optimizer's flat slices cut matrices that "
                                  "Newton-Schulz needs whole (drop --distributed-optimizer)");
    muon_ = std::make_unique<MuonExchange>(config, groups, comms, params);
  }
  // Sequence-parallel params share the dense buffer unless GTP shards the dense weights but not them: the plan
  // must then give both the same collective.
  const auto& dense_sync = plan_.of(ParamClass::dense);
  const auto& sp_sync = plan_.of(ParamClass::sequence_parallel);
  const bool sp_apart = dense_sync.gtp_sharded();
  if (!sp_apart && (dense_sync.group != sp_sync.group || dense_sync.op != sp_sync.op ||
                    dense_sync.divide_by_global_tokens != sp_sync.divide_by_global_tokens ||
                    dense_sync.postscale != sp_sync.postscale))
    throw std::logic_error("gradient sync plan: dense and sequence-parallel params differ after the collective");
  const auto tensors = shard_tensors(params, 0);
  Buffer dense, expert, sp;
  expert.param_class = ParamClass::expert;
  sp.param_class = ParamClass::sequence_parallel;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (muon_ && muon_->is_muon(i)) continue;
    const ParamClass pc = tensors[i].param_class;
    Buffer& b = pc == ParamClass::expert ? expert : pc == ParamClass::sequence_parallel && sp_apart ? sp : dense;
    b.tensors.push_back(i);
    b.size += tensors[i].size;
  }
  for (Buffer* b : {&dense, &expert, &sp}) {
    if (b == &sp && !sp_apart) continue;
    const GradSyncPlan::ClassSync& sync = plan_.of(b->param_class);
    b->group = sync.group;
    b->shard_group = settings.distributed ? b->group : sync.gtp_sharded() ? sync.gtp_group : nullptr;
    const int g = b->shard_group ? b->shard_group->size() : 1;
    b->padded = (b->size + g - 1) / g * g;  // Megatron pads buckets so every rank's slice has the same size
    b->slice_size = b->padded / g;
    b->slice_begin = b->shard_group ? b->shard_group->rank() * b->slice_size : 0;
    const auto state = static_cast<size_t>(b->shard_group ? b->slice_size : b->size);
    if (settings.config.kind != OptimizerKind::sgd) {  // Adam, or Muon's AdamW part
      b->m.assign(state, 0.0);
      b->v.assign(state, 0.0);
    }
    buffers_.push_back(std::move(*b));
  }
}

std::vector<double> RankOptimizer::flatten(const Buffer& b, ModelShard<double>& shard) const {
  const auto tensors = shard_tensors(shard, 0);
  std::vector<double> flat;
  flat.reserve(static_cast<size_t>(b.padded));
  for (size_t i : b.tensors) flat.insert(flat.end(), tensors[i].data, tensors[i].data + tensors[i].size);
  flat.resize(static_cast<size_t>(b.padded), 0.0);
  return flat;
}

void RankOptimizer::unflatten(const Buffer& b, const std::vector<double>& flat, ModelShard<double>& shard) const {
  const auto tensors = shard_tensors(shard, 0);
  size_t at = 0;
  for (size_t i : b.tensors) {
    std::copy(flat.begin() + static_cast<std::ptrdiff_t>(at),
              flat.begin() + static_cast<std::ptrdiff_t>(at) + tensors[i].size, tensors[i].data);
    at += static_cast<size_t>(tensors[i].size);
  }
}

// Plain SGD or AdamW (torch.optim.AdamW, bias-corrected), elementwise over `count` entries.
void RankOptimizer::update(Buffer& b, double* params, const double* grads, Eigen::Index count,
                           Eigen::Index state_offset) {
  const OptimizerConfig& o = settings_.config;
  if (o.kind == OptimizerKind::sgd) {
    for (Eigen::Index j = 0; j < count; ++j) params[j] -= o.sgd.lr * grads[j];
    return;
  }
  const AdamConfig& a = o.adam;
  const double bias1 = 1.0 - std::pow(a.beta1, step_), bias2 = 1.0 - std::pow(a.beta2, step_);
  for (Eigen::Index j = 0; j < count; ++j) {
    double& m = b.m[static_cast<size_t>(state_offset + j)];
    double& v = b.v[static_cast<size_t>(state_offset + j)];
    m = a.beta1 * m + (1 - a.beta1) * grads[j];
    v = a.beta2 * v + (1 - a.beta2) * grads[j] * grads[j];
    params[j] -= a.lr * ((m / bias1) / (std::sqrt(v / bias2) + a.eps) + a.weight_decay * params[j]);
  }
}

double RankOptimizer::buffer_grad_squares(const std::vector<std::vector<double>>& synced) const {
  const auto tensors = shard_tensors(params_, 0);
  double squares[2] = {0, 0};  // dense, expert
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const Buffer& b = buffers_[i];
    double& sum = squares[b.param_class == ParamClass::expert ? 1 : 0];
    const Eigen::Index begin = b.shard_group ? b.slice_begin : 0;  // where synced[i] starts in the buffer
    const Eigen::Index end = begin + static_cast<Eigen::Index>(synced[i].size());
    Eigen::Index offset = 0;  // of tensor k in the buffer
    for (size_t k : b.tensors) {
      const Eigen::Index lo = std::max(offset, begin), hi = std::min(offset + tensors[k].size, end);
      offset += tensors[k].size;
      if (tensors[k].param_class == ParamClass::sequence_parallel && tp_->rank() != 0) continue;
      for (Eigen::Index j = lo; j < hi; ++j) {
        const double g = synced[i][static_cast<size_t>(j - begin)];
        sum += g * g;
      }
    }
    // The slices of a shard group split the buffer over it; DDP's replicas all hold the same sum.
    Communicator* over = b.shard_group;
    if (over) over->allreduce<double>(std::span(&sum, 1), ReduceOp::sum);
  }
  for (Communicator* axis : {tp_, pp_}) axis->allreduce<double>(std::span(&squares[0], 1), ReduceOp::sum);
  for (Communicator* axis : {expt_tp_, ep_, pp_}) axis->allreduce<double>(std::span(&squares[1], 1), ReduceOp::sum);
  return squares[0] + squares[1];
}

void RankOptimizer::step(ModelShard<double>& raw_grads, double global_tokens) {
  ++step_;
  for (auto& t : shard_tensors(raw_grads, 0))
    plan_.before_collective(t.param_class, std::span<double>(t.data, static_cast<size_t>(t.size)));
  // 1. Synchronise each buffer: the whole gradient (DDP) or this rank's slice of it (distributed).
  std::vector<std::vector<double>> synced(buffers_.size());
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Buffer& b = buffers_[i];
    if (b.tensors.empty()) continue;
    const ReduceOp op = plan_.of(b.param_class).op;
    std::vector<double> g = flatten(b, raw_grads);
    if (b.shard_group) {
      synced[i].resize(static_cast<size_t>(b.slice_size));
      if (b.shard_group == b.group) {  // distributed optimizer
        b.group->reduce_scatter<double>(g, synced[i], op);
      } else {  // GTP: the temporary wgrad into this rank's shard, then over the shard's replicas
        b.shard_group->reduce_scatter<double>(g, synced[i], ReduceOp::sum);
        b.group->allreduce<double>(synced[i], op);
      }
    } else {
      b.group->allreduce<double>(g, op);
      g.resize(static_cast<size_t>(b.size));  // without the padding
      synced[i] = std::move(g);
    }
    plan_.after_collective<double>(b.param_class, synced[i], global_tokens);
  }
  if (muon_) muon_->gather_gradients(raw_grads, plan_, global_tokens);  // Muon's matrices, whole at their owners
  // 2. Clip: one factor for every gradient of the model, from the norm over all of them.
  if (settings_.config.clip_grad > 0) {
    last_grad_norm_ = std::sqrt(buffer_grad_squares(synced) + (muon_ ? muon_->squares() : 0.0));
    const double c = clip_coefficient(settings_.config.clip_grad, last_grad_norm_);
    if (c < 1.0) {
      for (auto& g : synced)
        for (double& x : g) x *= c;
      if (muon_) muon_->scale_gradients(c);
    }
  }
  // 3. Update what this rank owns; a shard group then all-gathers the updated slices (GTP: the whole weights of the
  //    next step's GEMMs).
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Buffer& b = buffers_[i];
    if (b.tensors.empty()) continue;
    std::vector<double> p = flatten(b, params_);
    if (!b.shard_group) {
      update(b, p.data(), synced[i].data(), b.size, 0);
      unflatten(b, p, params_);
      continue;
    }
    update(b, p.data() + b.slice_begin, synced[i].data(), b.slice_size, 0);
    std::vector<double> gathered(static_cast<size_t>(b.padded));
    b.shard_group->allgather<double>(
        std::span<const double>(p.data() + b.slice_begin, static_cast<size_t>(b.slice_size)), gathered);
    unflatten(b, gathered, params_);
  }
  if (muon_) muon_->update(settings_.config.muon, params_);
}

ShardMoments RankOptimizer::moments() const {
  ShardMoments out;
  out.step = step_;
  out.kind = settings_.config.kind;
  if (settings_.config.kind == OptimizerKind::sgd) return out;
  const auto tensors = shard_tensors(params_, 0);
  out.m.resize(tensors.size());
  out.v.resize(tensors.size());
  if (muon_) {
    out.m = muon_->momentum_pieces();
    for (size_t i = 0; i < tensors.size(); ++i)
      if (muon_->is_muon(i)) out.v[i].assign(static_cast<size_t>(tensors[i].size), 0.0);
  }
  for (const Buffer& b : buffers_) {
    std::vector<double> m = b.m, v = b.v;
    if (b.shard_group) {
      m.assign(static_cast<size_t>(b.padded), 0.0);
      v.assign(static_cast<size_t>(b.padded), 0.0);
      b.shard_group->allgather<double>(b.m, m);
      b.shard_group->allgather<double>(b.v, v);
    }
    size_t at = 0;
    for (size_t i : b.tensors) {
      const auto n = static_cast<size_t>(tensors[i].size);
      out.m[i].assign(m.begin() + static_cast<std::ptrdiff_t>(at), m.begin() + static_cast<std::ptrdiff_t>(at + n));
      out.v[i].assign(v.begin() + static_cast<std::ptrdiff_t>(at), v.begin() + static_cast<std::ptrdiff_t>(at + n));
      at += n;
    }
  }
  return out;
}

void RankOptimizer::set_moments(const ShardMoments& moments) {
  step_ = moments.step;
  if (settings_.config.kind == OptimizerKind::sgd) return;
  const auto tensors = shard_tensors(params_, 0);
  if (moments.m.size() != tensors.size() || moments.v.size() != tensors.size())
    throw std::invalid_argument("optimizer state: one moment per trained tensor is required");
  if (muon_) muon_->set_momentum(moments.m);
  for (Buffer& b : buffers_) {
    std::vector<double> m, v;
    for (size_t i : b.tensors) {
      if (static_cast<Eigen::Index>(moments.m[i].size()) != tensors[i].size)
        throw std::invalid_argument("optimizer state: moments of " + tensors[i].name + " have the wrong size");
      m.insert(m.end(), moments.m[i].begin(), moments.m[i].end());
      v.insert(v.end(), moments.v[i].begin(), moments.v[i].end());
    }
    m.resize(static_cast<size_t>(b.padded), 0.0);
    v.resize(static_cast<size_t>(b.padded), 0.0);
    const auto begin = m.begin() + b.slice_begin;
    const auto count = static_cast<std::ptrdiff_t>(b.m.size());
    b.m.assign(begin, begin + count);
    b.v.assign(v.begin() + b.slice_begin, v.begin() + b.slice_begin + count);
  }
}

}  // namespace moe::dist
