#include "golden/golden_case.hpp"

#include "golden/case_files.hpp"

#include <nlohmann/json.hpp>

#include <set>

namespace moe::golden {
namespace {

struct TensorSpec {
  formats::NpyDtype dtype;
  std::vector<std::int64_t> shape;  // kAnyRows in the first dimension: any size (tid2eid's vocabulary)
};

TensorSpec spec_of(const CaseHeader& h, const std::string& name) {
  const MoeConfig& c = h.config;
  const std::int64_t T = std::int64_t{h.seq} * h.batch, H = c.hidden, E = c.num_experts, k = c.topk,
                     d = c.ffn_hidden, w = c.expert_width(), ds = c.shared_expert_ffn_hidden, lat = c.latent_size;
  const auto real = [](std::vector<std::int64_t> s) { return TensorSpec{formats::NpyDtype::f8, std::move(s)}; };
  const std::map<std::string, TensorSpec> specs{
      {"x", real({T, H})},
      {"input_ids", {formats::NpyDtype::i8, {h.batch, h.seq}}},
      {"router_weight", real({E, H})},
      {"expert_bias", real({E})},
      {"tid2eid", {formats::NpyDtype::i8, {kAnyRows, k}}},
      {"expert_fc1", real({E, 2 * d, w})},
      {"expert_fc2", real({E, w, d})},
      {"shared_fc1", real({2 * ds, H})},
      {"shared_fc2", real({H, ds})},
      {"shared_gate", real({1, H})},
      {"latent_down", real({lat, H})},
      {"latent_up", real({H, lat})},
      {"grad_y", real({T, H})},
      {"padding_mask", {formats::NpyDtype::b1, {T}}},
      {"y", real({T, H})},
      {"probs", real({T, E})},
      {"routing_map", {formats::NpyDtype::b1, {T, E}}},
      {"tokens_per_expert", {formats::NpyDtype::i8, {E}}},
      {"aux_loss", real({})},
      {"z_loss", real({})},
      {"expert_bias_updated", real({E})},
      {"grad_x", real({T, H})},
      {"grad_router_weight", real({E, H})},
      {"grad_expert_fc1", real({E, 2 * d, w})},
      {"grad_expert_fc2", real({E, w, d})},
      {"grad_shared_fc1", real({2 * ds, H})},
      {"grad_shared_fc2", real({H, ds})},
      {"grad_shared_gate", real({1, H})},
      {"grad_latent_down", real({lat, H})},
      {"grad_latent_up", real({H, lat})},
  };
  const auto it = specs.find(name);
  if (it == specs.end()) throw CaseFormatError("'" + name + "' is not a tensor of the golden format");
  return it->second;
}

}  // namespace

std::vector<std::string> input_tensor_names(const CaseHeader& h) {
  std::vector<std::string> names = input_tensor_names(h.config);
  if (h.padding_mask) names.push_back("padding_mask");
  return names;
}

std::vector<std::string> input_tensor_names(const MoeConfig& c) {
  std::vector<std::string> names{"x", "router_weight", "expert_fc1", "expert_fc2", "grad_y"};
  if (c.hash_routing) names.insert(names.end(), {"input_ids", "tid2eid"});
  if (c.expert_bias) names.push_back("expert_bias");
  if (c.has_shared_expert()) names.insert(names.end(), {"shared_fc1", "shared_fc2"});
  if (c.shared_expert_gate) names.push_back("shared_gate");
  if (c.latent_size > 0) names.insert(names.end(), {"latent_down", "latent_up"});
  return names;
}

std::vector<std::string> output_tensor_names(const MoeConfig& c) {
  std::vector<std::string> names{"y",      "probs",  "routing_map", "tokens_per_expert", "grad_x",
                                 "grad_router_weight", "grad_expert_fc1", "grad_expert_fc2"};
  if (c.expert_bias && c.bias_update_rate) names.push_back("expert_bias_updated");
  if (c.aux_loss_type != AuxLossType::none) names.push_back("aux_loss");
  if (c.z_loss_coeff > 0) names.push_back("z_loss");
  if (c.has_shared_expert()) names.insert(names.end(), {"grad_shared_fc1", "grad_shared_fc2"});
  if (c.shared_expert_gate) names.push_back("grad_shared_gate");
  if (c.latent_size > 0) names.insert(names.end(), {"grad_latent_down", "grad_latent_up"});
  return names;
}

void check_tensor(const CaseHeader& header, const std::string& name, const formats::NpyArray& array) {
  const TensorSpec spec = spec_of(header, name);
  check_dtype_and_shape(name, array, spec.dtype, spec.shape);
}

bool is_case_directory(const std::filesystem::path& directory) {
  recover_case_directory(directory);
  return std::filesystem::is_regular_file(directory / kCaseJson);
}

GoldenCase read_case(const std::filesystem::path& directory) {
  const nlohmann::json root = read_case_json(directory);
  const std::string origin = (directory / kCaseJson).string();
  GoldenCase result;
  result.header = case_header_from_json(root, origin);
  // Format 2's optional input: present or not, as the files say (in format 1 it is an extra tensor).
  result.header.padding_mask = case_format_of(root, origin) == kCaseFormatV2 &&
                               std::filesystem::is_regular_file(directory / "padding_mask.npy");

  std::set<std::string> expected;
  for (const auto& n : input_tensor_names(result.header)) expected.insert(n);
  for (const auto& n : output_tensor_names(result.header.config)) expected.insert(n);
  result.tensors = read_case_tensors(directory, expected, [&](const std::string& name, const formats::NpyArray& array) {
    check_tensor(result.header, name, array);
  });
  return result;
}

void write_case(const std::filesystem::path& directory, const GoldenCase& golden_case) {
  const CaseHeader& h = golden_case.header;
  h.config.validate();
  std::set<std::string> expected;
  for (const auto& n : input_tensor_names(h)) expected.insert(n);
  for (const auto& n : output_tensor_names(h.config)) expected.insert(n);
  for (const auto& [name, array] : golden_case.tensors) {
    if (!expected.count(name)) throw CaseFormatError("write_case: extra tensor '" + name + "'");
    check_tensor(h, name, array);
    check_finite(name, array);  // a case that could never be verified is not written
  }
  for (const auto& name : expected) {
    if (!golden_case.tensors.count(name)) throw CaseFormatError("write_case: missing tensor '" + name + "'");
  }
  write_case_directory(directory, case_header_to_json(h).dump(2) + "\n", golden_case.tensors);
}

}  // namespace moe::golden
