// One memory estimate for everything that allocates from a user's sizes (the Python module's entry points,
// `moe-oracle explain --model`): the bytes a model's parameters and a layer's activations will take, computed from
// the config and the shape alone, before anything is allocated, so that a size no machine holds is refused with a
// message instead of ending in std::bad_alloc after taking all memory.
//
// The arithmetic saturates at 2^64 − 1 (a product that overflows is "more than any budget"), so any int a config
// may hold gives a meaningful answer. The figures are estimates: they count the tensors that dominate (parameters
// exactly, activations by their largest intermediates), not allocator overhead.
#pragma once

#include "reference/config.hpp"
#include "reference/model.hpp"

#include <cstdint>
#include <string>

namespace moe {

// Bytes of one MoE layer's parameters (router, experts, shared expert, latent projections, expert bias, and with
// hash routing tid2eid [vocab, k]), in `scalar_bytes`-wide reals (8 for double).
std::uint64_t layer_param_bytes(const MoeConfig& config, int vocab, std::uint64_t scalar_bytes = 8);
// Bytes of a whole model's parameters: embedding and head [vocab, h], per block its norms, layer and attention,
// the MTP blocks' own tensors.
std::uint64_t model_param_bytes(const ModelConfig& config, std::uint64_t scalar_bytes = 8);
// Bytes of one layer's forward and backward intermediates on `tokens` rows (x, y, their gradients, router logits
// and scores, each expert row's [2d] activation and its gradient, the shared expert's).
std::uint64_t layer_activation_bytes(const MoeConfig& config, std::uint64_t tokens, std::uint64_t scalar_bytes = 8);
// One layer's seeded inputs (random_params, random_inputs, random_grad_y): parameters, x and grad_y [T, h], and
// with hash routing input_ids [batch, seq] int64.
std::uint64_t layer_inputs_bytes(const MoeConfig& config, int vocab, int seq, int batch);
// A global batch [size, seq]: input_ids and labels (int64) and the loss mask.
std::uint64_t global_batch_bytes(int seq, int size);
// A global step of a model on a [size, seq] batch: parameters, their gradient and its running sum, every block's
// activations on the whole batch and the head's logits [tokens, vocab] with their gradient.
std::uint64_t global_step_bytes(const ModelConfig& config, int seq, int size);
// Loading a checkpoint of `config` (distributed/train/checkpoint.cpp, load_checkpoint), whose config comes from an
// untrusted checkpoint.json: the parameters, and with `moments` Adam's two moment sets; while the pieces are
// assembled, each tensor's value (double) and coverage count (int); one piece's buffer (at most the parameters);
// and per tensor its entries in the loader's tables, which outweigh the values when experts are many and tiny.
std::uint64_t checkpoint_load_bytes(const ModelConfig& config, bool moments);

// The memory one call may take: MOE_ORACLE_MEMORY_BUDGET (bytes, a decimal integer) when set, else the machine's
// physical memory (sysconf). A malformed variable is refused (std::invalid_argument), never ignored.
std::uint64_t memory_budget();
// Throws std::invalid_argument "<what>: needs about N bytes (…), more than the memory budget of M bytes (…)" when
// `bytes` exceeds memory_budget().
void require_memory(std::uint64_t bytes, const std::string& what);

}  // namespace moe
