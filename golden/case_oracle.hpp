// The bridge between golden-format tensors and the oracle: the tensors (names and shapes of golden/README.md)
// become MoeParams/MoeInputs/grad_y, the oracle's forward and backward become the output tensors. A case holds one
// layer on one token partition (all rows in order), no global-aux history; the semantics travel in the config, a
// format-2 padding_mask in MoeInputs::padding_mask.
// The pieces are public and templated on the scalar so that the Python binding (python/) maps its arrays through
// the same code as `moe-oracle golden verify`, in double or float (reals are stored as double either way: a float
// widens exactly).
#pragma once

#include "golden/golden_case.hpp"
#include "reference/moe_layer.hpp"

#include <cstdint>
#include <map>
#include <string>

namespace moe::golden {

using TensorMap = std::map<std::string, formats::NpyArray>;

struct OracleInputs {
  MoeParams<double> params;
  MoeInputs<double> inputs;
  Matrix<double> grad_y;
};

// The layer's parameters among `tensors`: those the config selects (input_tensor_names minus x, input_ids and
// grad_y) must be present with the shapes check_tensor accepts; others are ignored.
template <typename T>
MoeParams<T> params_from_tensors(const MoeConfig& config, const TensorMap& tensors);
// x [seq·batch, h], with hash routing input_ids [batch, seq], and padding_mask [T] when present; one partition.
template <typename T>
MoeInputs<T> inputs_from_tensors(const MoeConfig& config, int seq, int batch, const TensorMap& tensors);
// A [rows, cols] real tensor as a row-major matrix (grad_y).
template <typename T>
Matrix<T> matrix_from_tensor(const formats::NpyArray& array);

// Throws CaseFormatError naming the tensor and index when an input holds a NaN or ±inf (check_finite).
OracleInputs oracle_inputs(const GoldenCase& golden_case);

// The input tensors of a case (x, input_ids, parameters, grad_y) as the config selects them.
TensorMap input_tensors(const MoeConfig& config, const OracleInputs& in);
// y, probs, routing_map, tokens_per_expert and, as the config selects them, expert_bias_updated, aux_loss, z_loss.
template <typename T>
TensorMap forward_tensors(const MoeConfig& config, const MoeForward<T>& forward);
// grad_x, grad_router_weight, grad_expert_fc1, grad_expert_fc2 and the config's other grad_* tensors.
template <typename T>
TensorMap gradient_tensors(const MoeConfig& config, const MoeGradients<T>& grads);

// The output tensors the oracle computes for the case's inputs (loss L = Σ⟨grad_y, y⟩ + aux_loss + z_loss), on
// either path of the experts (the per-token definition wrote every stored case).
TensorMap oracle_outputs(const MoeConfig& config, const OracleInputs& in, ExpertPath path = ExpertPath::per_token);

// A new case: inputs from moe::random_params/random_inputs/random_grad_y (seeds seed, seed+1, seed+2, as
// `moe-oracle check`), outputs from the oracle.
GoldenCase oracle_case(const MoeConfig& config, int seq, int batch, int vocab, std::uint64_t seed,
                       const Tolerance& tolerance, const std::string& description);

}  // namespace moe::golden
