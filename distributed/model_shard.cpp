#include "distributed/model_shard.hpp"

namespace moe::dist {

template <typename T>
ModelShard<T> shard_model(const ModelConfig& config, const ModelParams<T>& global, const ProcessGroups& groups,
                          int rank) {
  ModelShard<T> s{global.embedding, global.block_norm, {}, global.final_norm, global.head};
  for (int l = 0; l < config.num_layers; ++l)
    s.layers.push_back(shard_layer(config.layer_config(l), global.layers[static_cast<size_t>(l)], groups, rank));
  return s;
}

template <typename T>
ModelShard<T> zeros_like(const ModelShard<T>& s) {
  ModelShard<T> z;
  z.embedding = Matrix<T>::Zero(s.embedding.rows(), s.embedding.cols());
  for (const auto& w : s.block_norm) z.block_norm.push_back(Vector<T>::Zero(w.size()));
  for (const auto& layer : s.layers) z.layers.push_back(zeros_like(layer));
  z.final_norm = Vector<T>::Zero(s.final_norm.size());
  z.head = Matrix<T>::Zero(s.head.rows(), s.head.cols());
  return z;
}

template <typename T>
std::vector<ShardTensor<T>> shard_tensors(const ModelConfig& config, ModelShard<T>& s, int first_expert) {
  std::vector<ShardTensor<T>> out;
  auto add = [&out](std::string name, ParamClass cls, auto& m) {
    if (m.size() > 0) out.push_back({std::move(name), cls, m.data(), m.size()});
  };
  const auto sp = ParamClass::sequence_parallel;
  add("embedding", sp, s.embedding);
  for (int l = 0; l < config.num_layers; ++l) {
    const auto li = static_cast<size_t>(l);
    const std::string pre = "layer" + std::to_string(l) + ".";
    LayerShard<T>& layer = s.layers[li];
    add(pre + "block_norm", sp, s.block_norm[li]);
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
  }
  add("final_norm", sp, s.final_norm);
  add("head", sp, s.head);
  return out;
}

template ModelShard<double> shard_model<double>(const ModelConfig&, const ModelParams<double>&, const ProcessGroups&,
                                                int);
template ModelShard<double> zeros_like<double>(const ModelShard<double>&);
template std::vector<ShardTensor<double>> shard_tensors<double>(const ModelConfig&, ModelShard<double>&, int);

}  // namespace moe::dist
