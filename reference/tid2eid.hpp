// Hash-routing tables. DeepSeek-V4 ships a learned tid2eid per hash layer (how it is built is undisclosed);
// Megatron's dev branch fills a placeholder, column j = (id + j) mod E. A placeholder is not the model's table,
// so making one always says so.
#pragma once

#include "reference/tensor.hpp"

#include <ostream>
#include <stdexcept>

namespace moe {

inline IndexMatrix placeholder_tid2eid(int vocab, int topk, int num_experts, std::ostream& warnings) {
  if (vocab <= 0 || topk <= 0 || topk > num_experts)
    throw std::invalid_argument("placeholder tid2eid: need vocab > 0 and 0 < topk <= num_experts");
  warnings << "warning: using the placeholder tid2eid table (expert = (id + j) mod E); DeepSeek-V4 hash layers use "
              "a learned table from the checkpoint\n";
  IndexMatrix table(vocab, topk);
  for (int id = 0; id < vocab; ++id)
    for (int j = 0; j < topk; ++j) table(id, j) = (id + j) % num_experts;
  return table;
}

}  // namespace moe
