// The checkpoint every input of the `checkpoint` harness is about: a small model with a tensor of each kind the
// format stores (embedding and head, norms, router, expert bias, a hash layer's tid2eid, routed experts sharded by
// ETP, a shared expert sharded by TP with its gate) and Adam moments, written by the real save path.
#pragma once

#include "reference/model.hpp"

#include <filesystem>

namespace moe::fuzz {

ModelConfig checkpoint_model();

// Trains checkpoint_model() one Adam step on in-process ranks laid out world 4 = tp 2 · dp 2, ep 2, etp 2 (so that
// experts and the shared expert are written in pieces) and saves the checkpoint into `dir` (created).
void write_checkpoint(const std::filesystem::path& dir);

}  // namespace moe::fuzz
