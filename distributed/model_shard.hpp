// What one rank holds of the whole model (reference/model.hpp's ModelParams cut by the layout): the embedding,
// norms and head replicated like the router (sequence-parallel params: each TP rank sees other tokens), and one
// LayerShard per MoE layer. Listing its tensors with their parameter class is what gradient sync and the
// comparison with the oracle iterate over.
#pragma once

#include "distributed/layer_shard.hpp"
#include "reference/model.hpp"
#include "reference/scaling_rules.hpp"

#include <string>
#include <vector>

namespace moe::dist {

template <typename T>
struct ModelShard {
  Matrix<T> embedding;                // [V, h]
  std::vector<Vector<T>> block_norm;  // L × [h]
  std::vector<LayerShard<T>> layers;
  Vector<T> final_norm;               // [h]
  Matrix<T> head;                     // [V, h]
};

template <typename T>
ModelShard<T> shard_model(const ModelConfig& config, const ModelParams<T>& global, const ProcessGroups& groups,
                          int rank);

template <typename T>
ModelShard<T> zeros_like(const ModelShard<T>& shard);

template <typename T>
struct ShardTensor {
  std::string name;  // as reference trained_tensors names it, experts by global id ("layer1.expert_fc1[5]")
  ParamClass param_class;
  T* data;
  Eigen::Index size;
};

// Every trained tensor of the shard (not the expert bias or tid2eid), in a fixed order.
template <typename T>
std::vector<ShardTensor<T>> shard_tensors(const ModelConfig& config, ModelShard<T>& shard, int first_expert);

}  // namespace moe::dist
