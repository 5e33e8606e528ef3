// What one rank holds of the whole model (reference/model.hpp's ModelParams cut by the layout): its pipeline
// stage's layers (one LayerShard each, and with attention its TP rank's heads: attention_rank.hpp), the embedding on
// the first stage, the final norm and head on the last — replicated like the router (sequence-parallel params: each
// TP rank sees other tokens). Listing its tensors
// with their parameter class is what gradient sync, the optimizer, checkpoints and the comparison with the oracle
// iterate over.
#pragma once

#include "distributed/train/layer_shard.hpp"
#include "reference/model.hpp"
#include "reference/scaling_rules.hpp"

#include <stdexcept>
#include <string>
#include <vector>

namespace moe::dist {

// The layers of (virtual) pipeline stage `stage` of `stages`: an even split, the first L mod stages one layer
// longer. With an interleaved pipeline there are pp·vpp virtual stages, and pp rank r holds chunks
// c = 0 … vpp−1, chunk c being virtual stage c·pp + r (Megatron's round-robin assignment).
struct StageLayers {
  int first = 0;
  int count = 0;
};
StageLayers stage_layers(int num_layers, int stages, int stage);  // throws unless 1 ≤ stages ≤ num_layers

// One MTP depth on the last stage: its own tensors (replicated like the norms) and its block, cut as a main block.
template <typename T>
struct MtpShard {
  MtpParams<T> own;               // enorm, hnorm, eh_proj, final_norm
  Vector<T> attention_norm;       // with attention, else empty
  AttentionWeights<T> attention;  // this TP rank's heads, with attention
  Vector<T> block_norm;
  LayerShard<T> layer;
};

template <typename T>
struct ModelShard {
  std::vector<StageLayers> chunks{{0, 0}};  // this rank's model chunks in order; `layers` holds them back to back
  bool first_stage = true;            // holds the embedding (pp rank 0, chunk 0)
  bool last_stage = true;             // holds the final norm and the head (pp rank pp−1, chunk vpp−1)
  Matrix<T> embedding;                // [V, h] on the first stage, else empty
  std::vector<Vector<T>> block_norm;  // this stage's layers × [h]
  std::vector<LayerShard<T>> layers;
  std::vector<Vector<T>> attention_norm;       // this stage's layers × [h] with attention, else empty
  std::vector<AttentionWeights<T>> attention;  // this TP rank's heads of each layer with attention, else empty
  Vector<T> final_norm;               // [h] on the last stage, else empty
  Matrix<T> head;                     // [V, h] on the last stage, else empty
  std::vector<MtpShard<T>> mtp;       // on the last stage (pp = 1: it needs the embedding too), else empty

  // Global index of layers[li].
  int layer_id(size_t li) const {
    for (const StageLayers& c : chunks) {
      if (li < static_cast<size_t>(c.count)) return c.first + static_cast<int>(li);
      li -= static_cast<size_t>(c.count);
    }
    throw std::out_of_range("ModelShard: a layer index beyond the shard's chunks");
  }
  // Index in `layers` of chunk c's first layer.
  size_t chunk_offset(size_t c) const {
    size_t at = 0;
    for (size_t i = 0; i < c; ++i) at += static_cast<size_t>(chunks[i].count);
    return at;
  }
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

// The weights a bf16 step computes with: the shard of main parameters with every trained tensor rounded to bf16
// (reference/model.hpp bf16_weights, shard by shard).
ModelShard<double> bf16_weights(ModelShard<double> main);

}  // namespace moe::dist
