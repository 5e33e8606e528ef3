// The bridge between a golden model case and the oracle: the case's batch and parameters become a GlobalBatch and
// ModelParams, moe::global_step under the case's layout, micro-batch, loss mode and semantics becomes the expected
// tensors (names and shapes of model_case.hpp).
#pragma once

#include "golden/model_case.hpp"

#include <map>
#include <string>

namespace moe::golden {

struct ModelOracleInputs {
  ModelParams<double> params;
  GlobalBatch batch;
};

// Throws CaseFormatError naming the tensor and index when an input holds a NaN or ±inf (check_finite).
ModelOracleInputs model_oracle_inputs(const ModelCase& model_case);

// Every output tensor of the case as the oracle computes it. Throws CaseFormatError when the oracle's list of
// trained tensors is not the case's (a renamed or reordered parameter).
std::map<std::string, formats::NpyArray> model_oracle_outputs(const ModelCaseHeader& header,
                                                              const ModelOracleInputs& in);

}  // namespace moe::golden
