// The bridge between a golden case and the oracle: the case's input tensors become MoeParams/MoeInputs/grad_y,
// the oracle's forward and backward become the output tensors (names and shapes of golden/README.md).
// A case holds one layer on one token partition (all rows in order), no global-aux history; the semantics travel
// in the config, a format-2 padding_mask in MoeInputs::padding_mask.
#pragma once

#include "golden/golden_case.hpp"
#include "reference/moe_layer.hpp"

#include <cstdint>
#include <map>
#include <string>

namespace moe::golden {

struct OracleInputs {
  MoeParams<double> params;
  MoeInputs<double> inputs;
  Matrix<double> grad_y;
};

OracleInputs oracle_inputs(const GoldenCase& golden_case);

// The output tensors the oracle computes for the case's inputs (loss L = Σ⟨grad_y, y⟩ + aux_loss + z_loss).
std::map<std::string, NpyArray> oracle_outputs(const MoeConfig& config, const OracleInputs& in);

// A new case: inputs from moe::random_params/random_inputs/random_grad_y (seeds seed, seed+1, seed+2, as
// `moe-oracle check`), outputs from the oracle.
GoldenCase oracle_case(const MoeConfig& config, int seq, int batch, int vocab, std::uint64_t seed,
                       const Tolerance& tolerance, const std::string& description);

}  // namespace moe::golden
