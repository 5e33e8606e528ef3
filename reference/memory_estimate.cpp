#include "reference/memory_estimate.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace moe {
namespace {

constexpr std::uint64_t kSaturated = std::numeric_limits<std::uint64_t>::max();

// Sizes come from ints; a negative one (refused by validate() elsewhere) counts as 0 here.
std::uint64_t n(std::int64_t v) { return v > 0 ? static_cast<std::uint64_t>(v) : 0; }

std::uint64_t add(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? kSaturated : r;
}
std::uint64_t mul(std::uint64_t a, std::uint64_t b) {
  std::uint64_t r;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}
std::uint64_t mul(std::uint64_t a, std::uint64_t b, std::uint64_t c) { return mul(mul(a, b), c); }

std::string gib(std::uint64_t bytes) {
  if (bytes == kSaturated) return "more than 2^64";
  return std::to_string(static_cast<double>(bytes) / double(1ULL << 30)).substr(0, 8) + " GiB";
}

}  // namespace

std::uint64_t layer_param_bytes(const MoeConfig& c, int vocab, std::uint64_t scalar_bytes) {
  const std::uint64_t h = n(c.hidden), E = n(c.num_experts), d = n(c.ffn_hidden), w = n(c.expert_width()),
                      ds = n(c.shared_expert_ffn_hidden), latent = n(c.latent_size);
  std::uint64_t reals = mul(E, h);                          // router
  reals = add(reals, mul(E, mul(3, d, w)));                  // fc1 [2d, w] and fc2 [w, d] per expert
  reals = add(reals, mul(3, ds, h));                         // shared fc1 [2ds, h], fc2 [h, ds]
  if (c.shared_expert_gate) reals = add(reals, h);
  reals = add(reals, mul(2, latent, h));
  if (c.expert_bias) reals = add(reals, E);
  std::uint64_t bytes = mul(reals, scalar_bytes);
  if (c.hash_routing) bytes = add(bytes, mul(n(vocab), n(c.topk), 8));  // tid2eid, int64
  return bytes;
}

std::uint64_t model_param_bytes(const ModelConfig& c, std::uint64_t scalar_bytes) {
  const std::uint64_t h = n(c.layer.hidden), blocks = add(n(c.num_layers), n(c.mtp_depth));
  std::uint64_t bytes = mul(mul(2, n(c.vocab), h), scalar_bytes);  // embedding, head
  bytes = add(bytes, mul(h, scalar_bytes));                         // final norm
  // Blocks are alike but for the hash layers (tid2eid, no expert bias): two kinds, counted without a loop over
  // num_layers (which may be 2^31 − 1). Each block also has its norm [h].
  const std::uint64_t hash = std::min(n(c.n_hash_layers), blocks), plain = blocks - hash;
  const MoeConfig hash_layer = c.layer_config(0), plain_layer = c.layer_config(c.n_hash_layers);
  bytes = add(bytes, mul(hash, add(layer_param_bytes(hash_layer, c.vocab, scalar_bytes), mul(h, scalar_bytes))));
  bytes = add(bytes, mul(plain, add(layer_param_bytes(plain_layer, c.vocab, scalar_bytes), mul(h, scalar_bytes))));
  if (c.has_attention()) {
    const AttentionConfig& a = c.attention;
    const std::uint64_t qd = mul(n(a.heads), n(a.head_dim)), kd = mul(n(a.groups), n(a.head_dim));
    bytes = add(bytes, mul(blocks, mul(add(add(mul(2, qd, h), mul(2, kd, h)), h), scalar_bytes)));
  }
  bytes = add(bytes, mul(n(c.mtp_depth), mul(add(mul(2, h, h), mul(3, h)), scalar_bytes)));
  return bytes;
}

std::uint64_t layer_activation_bytes(const MoeConfig& c, std::uint64_t tokens, std::uint64_t scalar_bytes) {
  const std::uint64_t h = n(c.hidden), E = n(c.num_experts), k = n(c.topk), d = n(c.ffn_hidden),
                      w = n(c.expert_width()), ds = n(c.shared_expert_ffn_hidden), latent = n(c.latent_size);
  std::uint64_t per_token = mul(6, h);                                   // x, y, grads, residual copies
  per_token = add(per_token, mul(6, E));                                 // logits, scores, probs, map, grads
  per_token = add(per_token, mul(k, add(mul(6, d), mul(2, w))));         // each routed row: [2d] in, act, grads
  per_token = add(per_token, add(mul(6, ds), mul(4, latent)));
  return mul(mul(tokens, per_token), scalar_bytes);
}

std::uint64_t layer_inputs_bytes(const MoeConfig& c, int vocab, int seq, int batch) {
  const std::uint64_t tokens = mul(n(seq), n(batch));
  std::uint64_t bytes = add(layer_param_bytes(c, vocab), mul(tokens, n(c.hidden), 16));
  if (c.hash_routing) bytes = add(bytes, mul(tokens, 8));
  return bytes;
}

std::uint64_t global_batch_bytes(int seq, int size) { return mul(mul(n(seq), n(size)), 17); }

std::uint64_t global_step_bytes(const ModelConfig& c, int seq, int size) {
  const std::uint64_t tokens = mul(n(seq), n(size));
  std::uint64_t bytes = mul(3, model_param_bytes(c));  // parameters, a microbatch's gradient, the sum
  const std::uint64_t blocks = add(n(c.num_layers), n(c.mtp_depth));
  bytes = add(bytes, mul(blocks, layer_activation_bytes(c.layer, tokens)));
  bytes = add(bytes, mul(mul(tokens, n(c.vocab)), mul(2, add(1, n(c.mtp_depth)), 8)));  // logits and their grad
  return bytes;
}

std::uint64_t checkpoint_load_bytes(const ModelConfig& c, bool moments) {
  const std::uint64_t sets = moments ? 3 : 1, params = model_param_bytes(c);
  const std::uint64_t values = mul(params, sets);
  std::uint64_t bytes = add(values, add(values, values == kSaturated ? kSaturated : values / 2));  // + coverage
  bytes = add(bytes, params);                                                                    // one piece
  // Tensors: per block 3 per expert (fc1's gate and up halves, fc2) and at most 16 others; embedding, head, final
  // norm; an MTP depth's 4 own. Each costs about 768 bytes of tables (its name twice, a setter, two map nodes, the
  // Eigen headers and their heap blocks): ~650 measured, 16 layers of 8192 experts of width 1 with moments.
  const std::uint64_t blocks = add(n(c.num_layers), n(c.mtp_depth));
  const std::uint64_t tensors = add(mul(blocks, add(mul(3, n(c.layer.num_experts)), 16)), add(3, mul(4, n(c.mtp_depth))));
  return add(bytes, mul(tensors, sets, 768));
}

std::uint64_t memory_budget() {
  if (const char* text = std::getenv("MOE_ORACLE_MEMORY_BUDGET")) {
    const std::string s = text;
    if (s.empty() || s.size() > 19 || s.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument("MOE_ORACLE_MEMORY_BUDGET: '" + s + "' is not a whole number of bytes");
    return std::stoull(s);
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return kSaturated;  // unknown: the allocator will have the last word
  return mul(n(pages), n(page));
}

void require_memory(std::uint64_t bytes, const std::string& what) {
  const std::uint64_t budget = memory_budget();
  if (bytes <= budget) return;
  const bool from_env = std::getenv("MOE_ORACLE_MEMORY_BUDGET") != nullptr;
  throw std::invalid_argument(what + (bytes == kSaturated ? ": needs more than 2^64 bytes"
                                                           : ": needs about " + std::to_string(bytes) + " bytes (" +
                                                                 gib(bytes) + ")") +
                              ", more than the memory budget of " + std::to_string(budget) +
                              " bytes (" + gib(budget) + (from_env ? ", MOE_ORACLE_MEMORY_BUDGET" : ", physical memory") +
                              ")");
}

}  // namespace moe
