// Which part of a whole model parameter one rank holds under Megatron's tensor and expert-tensor parallelism: the
// rule a step dump's per-rank gradients follow (compare/README.md, moe-step/1).
//   embedding, head [V, h]       vocab rows split over tp       (VocabParallelEmbedding, the column-parallel head)
//   expert_fc1 [2d, h]           gate rows and up rows each split over etp: shard j is [gate_j; up_j]
//   expert_fc2 [h, d]            columns split over etp          (row-parallel)
//   shared_fc1, shared_fc2       as the experts' two, over tp
//   attention_wq, _wk, _wv       rows split over tp (each rank's heads, and their key/value groups)
//   attention_wo [h, H·d]        columns split over tp           (row-parallel)
//   mtp<k>.eh_proj [h, 2h]       rows split over tp              (column-parallel)
//   norms, router                whole (replicated; under sequence parallelism Megatron sums their gradients over tp)
// Which experts a rank holds at all is the EP placement rule (ProcessGroups::experts_of).
#pragma once

#include "reference/process_groups.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace moe::compare {

enum class Split { whole, rows, glu_rows, columns };

struct ParameterShard {
  Split split = Split::whole;
  int parts = 1;
  int index = 0;
};

// The shard of the parameter named by its golden stem ("embedding", "layer0.expert_fc1.3", …) on `rank`.
ParameterShard parameter_shard(const std::string& stem, const ProcessGroups& groups, int rank);

// The shard's shape, for a whole 2-D parameter [rows, cols] (a 1-D one is always whole).
std::vector<std::int64_t> shard_shape(const std::vector<std::int64_t>& whole, const ParameterShard& shard);

// The shard's elements of a whole row-major array of shape `whole`, in the shard's own row-major order.
std::vector<double> take_shard(const std::vector<double>& values, const std::vector<std::int64_t>& whole,
                               const ParameterShard& shard);

}  // namespace moe::compare
