// What one rank holds of the whole model (reference/model.hpp's ModelParams cut by the layout): its pipeline
// stage's layers (one LayerShard each), the embedding on the first stage, the final norm and head on the last —
// replicated like the router (sequence-parallel params: each TP rank sees other tokens). Listing its tensors
// with their parameter class is what gradient sync, the optimizer, checkpoints and the comparison with the oracle
// iterate over.
#pragma once

#include "distributed/train/layer_shard.hpp"
#include "reference/model.hpp"
#include "reference/scaling_rules.hpp"

#include <string>
#include <vector>

namespace moe::dist {

// The layers of pipeline stage `stage` of `stages`: an even split, the first L mod pp stages one layer longer.
struct StageLayers {
  int first = 0;
  int count = 0;
};
StageLayers stage_layers(int num_layers, int stages, int stage);  // throws unless 1 ≤ stages ≤ num_layers

template <typename T>
struct ModelShard {
  int first_layer = 0;                // global index of layers[0]
  bool first_stage = true;            // holds the embedding
  bool last_stage = true;             // holds the final norm and the head
  Matrix<T> embedding;                // [V, h] on the first stage, else empty
  std::vector<Vector<T>> block_norm;  // this stage's layers × [h]
  std::vector<LayerShard<T>> layers;
  Vector<T> final_norm;               // [h] on the last stage, else empty
  Matrix<T> head;                     // [V, h] on the last stage, else empty
};

template <typename T>
ModelShard<T> shard_model(const ModelConfig& config, const ModelParams<T>& global, const ProcessGroups& groups,
                          int rank);

template <typename T>
ModelShard<T> zeros_like(const ModelShard<T>& shard);

// The same shard in another precision (every tensor cast; expert bias and tid2eid included).
template <typename To, typename From>
ModelShard<To> cast_shard(const ModelShard<From>& shard);

template <typename T>
struct ShardTensor {
  std::string name;  // as reference trained_tensors names it, experts by global id ("layer1.expert_fc1[5]")
  ParamClass param_class;
  T* data;
  Eigen::Index size;
};

// Every trained tensor of the shard (not the expert bias or tid2eid), in a fixed order; layers by global index.
template <typename T>
std::vector<ShardTensor<T>> shard_tensors(ModelShard<T>& shard, int first_expert);

}  // namespace moe::dist
