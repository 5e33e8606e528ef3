// A golden model case (format "moe-golden-model/1", golden/README.md): one global training step of the model of
// reference/model.hpp over a padded global batch, split as a parallel layout splits it (reference/global_step.hpp),
// under a loss mode and a semantics spec. A directory with case.json and one .npy per tensor:
//
//   inputs   input_ids, labels [B, S] (<i8), loss_mask [B, S] (|b1), and every parameter: embedding, head [V, h],
//            final_norm [h], per layer l: layer<l>.block_norm [h], layer<l>.router_weight [E, h],
//            layer<l>.expert_fc1.<e> [2d, w], layer<l>.expert_fc2.<e> [w, d], shared / gate / latent tensors as the
//            config has them, layer<l>.expert_bias [E] (layers with expert bias), layer<l>.tid2eid [V, k] (hash layers)
//   outputs  objective, ce_term, aux_term, z_term [], ce_weights [B, S], grad.<parameter> for every trained
//            parameter, layer<l>.bias_counts [E] (<i8, every layer), layer<l>.expert_bias_updated [E] (layers with
//            a bias update)
//
// A parameter's file stem is its trained_tensors name with "[e]" written ".e" (layer0.expert_fc1[3] ->
// layer0.expert_fc1.3). Reading is as strict as for layer cases: unknown keys, missing or extra tensors, wrong
// dtypes or shapes are CaseFormatErrors naming them.
#pragma once

#include "formats/npy.hpp"
#include "golden/case_json.hpp"
#include "reference/global_step.hpp"

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace moe::golden {

inline constexpr std::string_view kModelCaseFormat = "moe-golden-model/1";

struct ModelCaseHeader {
  std::string description;
  ModelConfig model;  // model.layer: the "config" object, semantics included
  int tp = 1;
  int cp = 1;
  int dp = 1;
  int seq = 0;          // S
  int global_batch = 0; // B
  int micro_batch = 0;  // b
  LossMode loss_mode = LossMode::sum;
  Tolerance tolerance = moe::tolerance(Compared::golden_case, Precision::float64);

  // world = tp·cp·dp; ep, etp and pp do not change the oracle's numbers and stay 1.
  ParallelLayout layout() const;
};

struct ModelCase {
  ModelCaseHeader header;
  std::map<std::string, formats::NpyArray> tensors;  // file stem -> array
};

// One tensor of a model case: its file stem, dtype and shape; `trained` names its trained_tensors entry (empty for
// the expert bias, tid2eid and the batch).
struct ModelTensorSpec {
  std::string stem;
  formats::NpyDtype dtype = formats::NpyDtype::f8;
  std::vector<std::int64_t> shape;
  std::string trained;
};

// "layer0.expert_fc1[3]" -> "layer0.expert_fc1.3"
std::string tensor_file_stem(std::string_view trained_name);

// The inputs (batch, then parameters in trained_tensors order with the bias and table after their layer's) and the
// expected outputs the header makes a case hold.
std::vector<ModelTensorSpec> model_input_specs(const ModelCaseHeader& header);
std::vector<ModelTensorSpec> model_output_specs(const ModelCaseHeader& header);

// Throws CaseFormatError naming the key; checks the layout, batch split and model config (global_step's rules).
ModelCaseHeader model_case_header_from_json(const nlohmann::json& root, const std::string& origin);

ModelCase read_model_case(const std::filesystem::path& directory);

}  // namespace moe::golden
