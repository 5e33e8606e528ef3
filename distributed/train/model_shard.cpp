#include "distributed/train/model_shard.hpp"

#include "distributed/train/attention_rank.hpp"
#include "reference/bf16.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe::dist {

StageLayers stage_layers(int num_layers, int stages, int stage) {
  if (stages < 1 || stages > num_layers)
    throw std::invalid_argument("pipeline: pp·vpp (" + std::to_string(stages) + " stages) must be between 1 and the "
                                "number of layers (" + std::to_string(num_layers) + ")");
  const int base = num_layers / stages, extra = num_layers % stages;
  return {stage * base + std::min(stage, extra), base + (stage < extra ? 1 : 0)};
}

template <typename T>
ModelShard<T> shard_model(const ModelConfig& config, const ModelParams<T>& global, const ProcessGroups& groups,
                          int rank) {
  const int pp = groups.layout().pp, vpp = groups.layout().vpp, stage = groups.rank_in(GroupKind::pp, rank);
  ModelShard<T> s;
  s.chunks.clear();
  for (int c = 0; c < vpp; ++c) s.chunks.push_back(stage_layers(config.num_layers, pp * vpp, c * pp + stage));
  s.first_stage = stage == 0;
  s.last_stage = stage == pp - 1;
  if (s.first_stage) s.embedding = global.embedding;
  if (s.last_stage) {
    s.final_norm = global.final_norm;
    s.head = global.head;
  }
  if (config.mtp_depth > 0 && pp > 1)
    throw std::invalid_argument("multi-token prediction runs with pp = 1 here: its depths need the embedding, which "
                                "lives on the first stage (Megatron ties a copy to the last)");
  const auto attention_of = [&](int l) {
    return tp_attention_slice(config.attention, global.attention[static_cast<size_t>(l)], groups.layout().tp,
                              groups.rank_in(GroupKind::tp, rank));
  };
  for (int l = config.num_layers; s.last_stage && l < config.num_blocks(); ++l) {
    const auto li = static_cast<size_t>(l);
    MtpShard<T> m;
    m.own = global.mtp[li - static_cast<size_t>(config.num_layers)];
    if (config.has_attention()) {
      m.attention_norm = global.attention_norm[li];
      m.attention = attention_of(l);
    }
    m.block_norm = global.block_norm[li];
    m.layer = shard_layer(config.layer_config(l), global.layers[li], groups, rank);
    s.mtp.push_back(std::move(m));
  }
  for (const StageLayers& chunk : s.chunks)
    for (int l = chunk.first; l < chunk.first + chunk.count; ++l) {
      s.block_norm.push_back(global.block_norm[static_cast<size_t>(l)]);
      s.layers.push_back(shard_layer(config.layer_config(l), global.layers[static_cast<size_t>(l)], groups, rank));
      if (config.has_attention()) {
        s.attention_norm.push_back(global.attention_norm[static_cast<size_t>(l)]);
        s.attention.push_back(attention_of(l));
      }
    }
  return s;
}

template <typename T>
ModelShard<T> zeros_like(const ModelShard<T>& s) {
  ModelShard<T> z;
  z.chunks = s.chunks;
  z.first_stage = s.first_stage;
  z.last_stage = s.last_stage;
  z.embedding = Matrix<T>::Zero(s.embedding.rows(), s.embedding.cols());
  auto zero = [](const Matrix<T>& m) { return Matrix<T>::Zero(m.rows(), m.cols()).eval(); };
  for (const auto& w : s.block_norm) z.block_norm.push_back(Vector<T>::Zero(w.size()));
  for (const auto& layer : s.layers) z.layers.push_back(zeros_like(layer));
  for (const auto& w : s.attention_norm) z.attention_norm.push_back(Vector<T>::Zero(w.size()));
  for (const auto& a : s.attention) z.attention.push_back(map_weights<T>(a, zero));
  auto zero_vector = [](const Vector<T>& v) { return Vector<T>::Zero(v.size()).eval(); };
  for (const MtpShard<T>& m : s.mtp)
    z.mtp.push_back({{zero_vector(m.own.enorm), zero_vector(m.own.hnorm), zero(m.own.eh_proj),
                      zero_vector(m.own.final_norm)},
                     zero_vector(m.attention_norm),
                     map_weights<T>(m.attention, zero),
                     zero_vector(m.block_norm),
                     zeros_like(m.layer)});
  z.final_norm = Vector<T>::Zero(s.final_norm.size());
  z.head = Matrix<T>::Zero(s.head.rows(), s.head.cols());
  return z;
}

template <typename T>
std::vector<ShardTensor<T>> shard_tensors(ModelShard<T>& s, int first_expert) {
  std::vector<ShardTensor<T>> out;
  auto add = [&out](std::string name, ParamClass cls, auto& m) {
    if (m.size() > 0) out.push_back({std::move(name), cls, m.data(), m.size()});
  };
  const auto sp = ParamClass::sequence_parallel;
  // One block's tensors under `pre` (attention empty without attention).
  auto add_block = [&](const std::string& pre, Vector<T>& attention_norm, AttentionWeights<T>& a,
                       Vector<T>& block_norm, LayerShard<T>& layer) {
    add(pre + "attention_norm", sp, attention_norm);
    add(pre + "attention_wq", ParamClass::dense, a.wq);
    add(pre + "attention_wk", ParamClass::dense, a.wk);
    add(pre + "attention_wv", ParamClass::dense, a.wv);
    add(pre + "attention_wo", ParamClass::dense, a.wo);
    add(pre + "block_norm", sp, block_norm);
    add(pre + "router_weight", sp, layer.router_weight);
    for (size_t i = 0; i < layer.experts.fc1.size(); ++i) {
      const std::string e = std::to_string(first_expert + static_cast<int>(i));
      add(pre + "expert_fc1[" + e + "]", ParamClass::expert, layer.experts.fc1[i]);
      add(pre + "expert_fc2[" + e + "]", ParamClass::expert, layer.experts.fc2[i]);
    }
    add(pre + "shared_fc1", ParamClass::dense, layer.shared_fc1);
    add(pre + "shared_fc2", ParamClass::dense, layer.shared_fc2);
    add(pre + "shared_gate", sp, layer.shared_gate);
    add(pre + "latent_down", sp, layer.latent_down);
    add(pre + "latent_up", sp, layer.latent_up);
  };
  add("embedding", sp, s.embedding);
  Vector<T> no_norm;
  AttentionWeights<T> no_attention;
  for (size_t li = 0; li < s.layers.size(); ++li) {
    const bool attention = !s.attention.empty();
    add_block("layer" + std::to_string(s.layer_id(li)) + ".", attention ? s.attention_norm[li] : no_norm,
              attention ? s.attention[li] : no_attention, s.block_norm[li], s.layers[li]);
  }
  for (size_t k = 0; k < s.mtp.size(); ++k) {
    MtpShard<T>& m = s.mtp[k];
    const std::string pre = "mtp" + std::to_string(k) + ".";
    add(pre + "enorm", sp, m.own.enorm);
    add(pre + "hnorm", sp, m.own.hnorm);
    add(pre + "eh_proj", sp, m.own.eh_proj);
    add_block(pre, m.attention_norm, m.attention, m.block_norm, m.layer);
    add(pre + "final_norm", sp, m.own.final_norm);
  }
  add("final_norm", sp, s.final_norm);
  add("head", sp, s.head);
  return out;
}

template <typename To, typename From>
ModelShard<To> cast_shard(const ModelShard<From>& s) {
  auto m = [](const auto& x) { return x.template cast<To>().eval(); };
  ModelShard<To> out;
  out.chunks = s.chunks;
  out.first_stage = s.first_stage;
  out.last_stage = s.last_stage;
  out.embedding = m(s.embedding);
  for (const auto& w : s.block_norm) out.block_norm.push_back(m(w));
  for (const auto& l : s.layers) {
    LayerShard<To> c = map_trained<To>(l, m);
    c.expert_bias = m(l.expert_bias);
    c.tid2eid = l.tid2eid;
    out.layers.push_back(std::move(c));
  }
  for (const auto& w : s.attention_norm) out.attention_norm.push_back(m(w));
  for (const auto& a : s.attention) out.attention.push_back(map_weights<To>(a, m));
  for (const MtpShard<From>& d : s.mtp) {
    LayerShard<To> c = map_trained<To>(d.layer, m);
    c.expert_bias = m(d.layer.expert_bias);
    out.mtp.push_back({{m(d.own.enorm), m(d.own.hnorm), m(d.own.eh_proj), m(d.own.final_norm)},
                       m(d.attention_norm),
                       map_weights<To>(d.attention, m),
                       m(d.block_norm),
                       std::move(c)});
  }
  out.final_norm = m(s.final_norm);
  out.head = m(s.head);
  return out;
}

ModelShard<double> bf16_weights(ModelShard<double> main) {
  for (const ShardTensor<double>& t : shard_tensors(main, 0))
    for (Eigen::Index i = 0; i < t.size; ++i) t.data[i] = round_bf16(t.data[i]);
  return main;
}

template ModelShard<float> cast_shard<float, double>(const ModelShard<double>&);
template ModelShard<double> cast_shard<double, float>(const ModelShard<float>&);
template ModelShard<float> zeros_like<float>(const ModelShard<float>&);
template std::vector<ShardTensor<float>> shard_tensors<float>(ModelShard<float>&, int);
template ModelShard<double> shard_model<double>(const ModelConfig&, const ModelParams<double>&, const ProcessGroups&,
                                                int);
template ModelShard<double> zeros_like<double>(const ModelShard<double>&);
template std::vector<ShardTensor<double>> shard_tensors<double>(ModelShard<double>&, int);

}  // namespace moe::dist
