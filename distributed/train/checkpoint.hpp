// Checkpoints that any layout can load (format "moe-checkpoint/1"): tensors are stored under their logical
// (global) names and shapes, each as pieces with an offset, written by the first rank that holds that piece:
//   layer3.expert17.fc1.gate [d, w]   rows sharded by ETP (fc1's gate and up halves are separate tensors, so they
//   layer3.expert17.fc1.up   [d, w]   stay paired whatever the ETP of the loader)
//   layer3.expert17.fc2      [w, d]   columns sharded by ETP
//   layer3.shared.fc1.gate / .fc1.up / .fc2   sharded by TP the same way
//   layer3.attention_wq / _wk / _wv           rows sharded by TP (a rank's heads), attention_wo columns
//   embedding, head, final_norm, layerL.block_norm, .attention_norm, .router_weight, .expert_bias, .tid2eid, .shared_gate,
//   .latent_down, .latent_up          whole
// Experts are found by global id, never by local index; Adam moments are stored the same way with ".adam_m" /
// ".adam_v" appended (under Muon, .adam_m of a matrix is its momentum buffer and .adam_v is zero; checkpoint.json's
// "moments" says which optimizer wrote them, "adam" when absent). checkpoint.json (written last) lists every piece with its file, offset, shape and FNV-1a
// checksum, the model config, the step and the optimizer.
//
// Loading reads and checks everything (format, model config, coverage of every tensor, file sizes, checksums)
// into new objects and returns them; nothing a caller holds is touched unless the whole load succeeds.
#pragma once

#include "distributed/comm/communicator.hpp"
#include "distributed/train/model_shard.hpp"
#include "distributed/train/rank_optimizer.hpp"

#include <string>

namespace moe::dist {

struct TrainingState {
  ModelParams<double> params;          // global (logical) tensors
  bool has_moments = false;
  OptimizerKind moments_of = OptimizerKind::adam;  // adam, or muon (adam_m then holds Muon's momentum for matrices)
  ModelParams<double> adam_m, adam_v;  // global moments in the shape of params (trained tensors only)
  int optimizer_step = 0;
  int training_step = 0;
};

// Collective over `world`: every rank writes the pieces it is the first holder of; rank 0 writes checkpoint.json
// after all pieces are on disk. `moments` may be empty (SGD). The folder `dir` appears or is replaced as a whole
// (storage/staged_directory.hpp): the ranks write into a staging folder beside it, every file fsynced, and rank 0
// swaps it into place after a collective, so that a crash or a kill at any moment leaves the complete old
// checkpoint or the complete new one at `dir`. An existing `dir` may hold only a checkpoint's files (checkpoint.json,
// *.bin, pieces.rank*.json); anything else is refused and left as it was. A failure on any rank throws the same
// one-line std::runtime_error on every rank and leaves `dir` untouched.
void save_checkpoint(const std::string& dir, Communicator& world, const ModelConfig& config,
                     const ProcessGroups& groups, ModelShard<double>& params, const ShardMoments& moments,
                     int training_step);

// The folder is untrusted input. Refused, each with one std::runtime_error line "checkpoint: <file>: <rule>",
// before anything is returned: checkpoint.json that is not a regular file or not valid JSON, another format or
// model, a value of the wrong JSON type; training_step / optimizer_step that are not integers in [0, 2^31); a
// piece file that is not a plain name in the folder (no '/', no '..'), not a regular file (FIFOs and devices are
// never opened), or a symlink leading out of the folder; an offset or shape that is not two integers >= 0 or does
// not fit its tensor (checked without sums that could overflow); a size or checksum mismatch; a NaN or ±inf value,
// a negative second moment, a tid2eid entry that is not an expert id in [0, E); a tensor not covered exactly once;
// a model whose load would need more than the memory budget (checkpoint_load_bytes, refused before allocating).
TrainingState load_checkpoint(const std::string& dir, const ModelConfig& config);

}  // namespace moe::dist
