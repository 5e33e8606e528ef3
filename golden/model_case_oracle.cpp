#include "golden/model_case_oracle.hpp"

#include "formats/npy_eigen.hpp"
#include "golden/case_files.hpp"

#include <stdexcept>

namespace moe::golden {
namespace {

BoolMatrix to_bool_matrix(const formats::NpyArray& a) {
  BoolMatrix m(a.shape[0], a.shape[1]);
  for (std::int64_t i = 0; i < a.size(); ++i) m.data()[i] = a.booleans[static_cast<size_t>(i)] != 0;
  return m;
}

formats::NpyArray from_counts(const std::vector<std::int64_t>& counts) {
  return formats::NpyArray::of_integers({static_cast<std::int64_t>(counts.size())}, counts);
}

}  // namespace

ModelOracleInputs model_oracle_inputs(const ModelCase& c) {
  const ModelCaseHeader& h = c.header;
  const auto& t = c.tensors;
  // Before global_step runs: a NaN weight of an expert that receives no token would reach no output.
  for (const ModelTensorSpec& s : model_input_specs(h)) {
    const auto it = t.find(s.stem);
    if (it == t.end()) throw CaseFormatError("missing tensor '" + s.stem + "'");
    check_finite(s.stem, it->second);
  }
  ModelOracleInputs in;
  in.batch.seq = h.seq;
  in.batch.size = h.global_batch;
  in.batch.input_ids = formats::to_index_matrix(t.at("input_ids"));
  in.batch.labels = formats::to_index_matrix(t.at("labels"));
  in.batch.loss_mask = to_bool_matrix(t.at("loss_mask"));

  ModelParams<double>& p = in.params;
  p.embedding = formats::to_matrix(t.at("embedding"));
  p.head = formats::to_matrix(t.at("head"));
  p.final_norm = formats::to_vector(t.at("final_norm"));
  for (int l = 0; l < h.model.num_blocks(); ++l) {
    const MoeConfig lc = h.model.layer_config(l);
    const std::string pre = h.model.block_prefix(l);
    const auto at = [&](const std::string& name) -> const formats::NpyArray& { return t.at(pre + name); };
    if (l >= h.model.num_layers)
      p.mtp.push_back({formats::to_vector(at("enorm")), formats::to_vector(at("hnorm")),
                       formats::to_matrix(at("eh_proj")), formats::to_vector(at("final_norm"))});
    if (h.model.has_attention()) {
      p.attention_norm.push_back(formats::to_vector(at("attention_norm")));
      p.attention.push_back({formats::to_matrix(at("attention_wq")), formats::to_matrix(at("attention_wk")),
                             formats::to_matrix(at("attention_wv")), formats::to_matrix(at("attention_wo"))});
    }
    p.block_norm.push_back(formats::to_vector(at("block_norm")));
    MoeParams<double> layer;
    layer.router_weight = formats::to_matrix(at("router_weight"));
    for (int e = 0; e < lc.num_experts; ++e) {
      layer.expert_fc1.push_back(formats::to_matrix(at("expert_fc1." + std::to_string(e))));
      layer.expert_fc2.push_back(formats::to_matrix(at("expert_fc2." + std::to_string(e))));
    }
    if (lc.has_shared_expert()) {
      layer.shared_fc1 = formats::to_matrix(at("shared_fc1"));
      layer.shared_fc2 = formats::to_matrix(at("shared_fc2"));
    }
    if (lc.shared_expert_gate) layer.shared_gate = formats::to_matrix(at("shared_gate"));
    if (lc.latent_size > 0) {
      layer.latent_down = formats::to_matrix(at("latent_down"));
      layer.latent_up = formats::to_matrix(at("latent_up"));
    }
    if (lc.expert_bias) layer.expert_bias = formats::to_vector(at("expert_bias"));
    if (lc.hash_routing) layer.tid2eid = formats::to_index_matrix(at("tid2eid"));
    p.layers.push_back(std::move(layer));
  }
  return in;
}

std::map<std::string, formats::NpyArray> model_oracle_outputs(const ModelCaseHeader& h, const ModelOracleInputs& in) {
  GlobalStep step = global_step(h.model, in.params, in.batch, h.layout(), h.micro_batch, h.loss_mode);
  std::map<std::string, formats::NpyArray> out;
  out.emplace("objective", formats::from_scalar(step.objective));
  out.emplace("ce_term", formats::from_scalar(step.ce_term));
  out.emplace("aux_term", formats::from_scalar(step.aux_term));
  out.emplace("z_term", formats::from_scalar(step.z_term));
  if (h.model.mtp_depth > 0) out.emplace("mtp_term", formats::from_scalar(step.mtp_term));
  out.emplace("ce_weights", formats::from_matrix(step.ce_weights));

  // Gradients: the oracle's trained tensors, which must be the case's, in the same order.
  std::vector<ModelTensorSpec> grads;
  for (const ModelTensorSpec& s : model_output_specs(h))
    if (!s.trained.empty()) grads.push_back(s);
  const auto views = trained_tensors(h.model, step.grads);
  if (views.size() != grads.size())
    throw CaseFormatError("the oracle trains " + std::to_string(views.size()) + " tensors, the case has " +
                          std::to_string(grads.size()) + " gradients");
  for (size_t i = 0; i < views.size(); ++i) {
    const ModelTensorSpec& s = grads[i];
    if (views[i].name != s.trained)
      throw CaseFormatError("the oracle's trained tensor " + std::to_string(i) + " is '" + views[i].name +
                            "', the case's is '" + s.trained + "'");
    out.emplace(s.stem, formats::NpyArray::of_reals(s.shape, {views[i].data, views[i].data + views[i].size}));
  }

  for (int l = 0; l < h.model.num_blocks(); ++l) {
    const auto li = static_cast<size_t>(l);
    const std::string pre = h.model.block_prefix(l);
    out.emplace(pre + "bias_counts", from_counts(step.bias_counts[li]));
    if (h.model.layer_config(l).bias_update_rate)
      out.emplace(pre + "expert_bias_updated", formats::from_vector(step.expert_bias_updated[li]));
  }
  return out;
}

}  // namespace moe::golden
