#include "golden/golden_case.hpp"

#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

namespace moe::golden {
namespace {

constexpr const char* kCaseJson = "case.json";

struct TensorSpec {
  NpyDtype dtype;
  std::vector<std::int64_t> shape;  // kAnyRows in the first dimension: any size (tid2eid's vocabulary)
};
constexpr std::int64_t kAnyRows = -1;

TensorSpec spec_of(const CaseHeader& h, const std::string& name) {
  const MoeConfig& c = h.config;
  const std::int64_t T = std::int64_t{h.seq} * h.batch, H = c.hidden, E = c.num_experts, k = c.topk,
                     d = c.ffn_hidden, w = c.expert_width(), ds = c.shared_expert_ffn_hidden, lat = c.latent_size;
  const auto real = [](std::vector<std::int64_t> s) { return TensorSpec{NpyDtype::f8, std::move(s)}; };
  const std::map<std::string, TensorSpec> specs{
      {"x", real({T, H})},
      {"input_ids", {NpyDtype::i8, {h.batch, h.seq}}},
      {"router_weight", real({E, H})},
      {"expert_bias", real({E})},
      {"tid2eid", {NpyDtype::i8, {kAnyRows, k}}},
      {"expert_fc1", real({E, 2 * d, w})},
      {"expert_fc2", real({E, w, d})},
      {"shared_fc1", real({2 * ds, H})},
      {"shared_fc2", real({H, ds})},
      {"shared_gate", real({1, H})},
      {"latent_down", real({lat, H})},
      {"latent_up", real({H, lat})},
      {"grad_y", real({T, H})},
      {"y", real({T, H})},
      {"probs", real({T, E})},
      {"routing_map", {NpyDtype::b1, {T, E}}},
      {"tokens_per_expert", {NpyDtype::i8, {E}}},
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

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + (shape[i] == kAnyRows ? std::string("V") : std::to_string(shape[i]));
  }
  return s + "]";
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw CaseFormatError(path.string() + ": cannot open");
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

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

void check_tensor(const CaseHeader& header, const std::string& name, const NpyArray& array) {
  const TensorSpec spec = spec_of(header, name);
  if (array.dtype != spec.dtype) {
    throw CaseFormatError("tensor '" + name + "' has dtype " + std::string(npy_descr(array.dtype)) + ", expected " +
                          std::string(npy_descr(spec.dtype)));
  }
  bool fits = array.shape.size() == spec.shape.size();
  for (std::size_t i = 0; fits && i < spec.shape.size(); ++i) {
    fits = spec.shape[i] == kAnyRows ? array.shape[i] > 0 : array.shape[i] == spec.shape[i];
  }
  if (!fits) {
    throw CaseFormatError("tensor '" + name + "' has shape " + array.shape_string() + ", expected " +
                          shape_string(spec.shape));
  }
}

bool is_case_directory(const std::filesystem::path& directory) {
  return std::filesystem::is_regular_file(directory / kCaseJson);
}

GoldenCase read_case(const std::filesystem::path& directory) {
  const auto json_path = directory / kCaseJson;
  if (!std::filesystem::is_regular_file(json_path)) {
    throw CaseFormatError(directory.string() + ": not a golden case (no " + kCaseJson + ")");
  }
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(read_text(json_path));
  } catch (const nlohmann::json::parse_error& e) {
    throw CaseFormatError(json_path.string() + ": invalid JSON: " + e.what());
  }
  GoldenCase result;
  result.header = case_header_from_json(root, json_path.string());

  std::set<std::string> expected;
  for (const auto& n : input_tensor_names(result.header.config)) expected.insert(n);
  for (const auto& n : output_tensor_names(result.header.config)) expected.insert(n);
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const auto file = entry.path().filename();
    if (file == kCaseJson) continue;
    const std::string stem = file.stem().string();
    if (file.extension() != ".npy" || !entry.is_regular_file()) {
      throw CaseFormatError(directory.string() + ": unexpected file '" + file.string() + "' in a case");
    }
    if (!expected.count(stem)) {
      throw CaseFormatError(directory.string() + ": extra tensor '" + stem + "' (not part of a case with this config)");
    }
    NpyArray array = read_npy(entry.path());
    try {
      check_tensor(result.header, stem, array);
    } catch (const CaseFormatError& e) {
      throw CaseFormatError(directory.string() + ": " + e.what());
    }
    result.tensors.emplace(stem, std::move(array));
  }
  for (const auto& name : expected) {
    if (!result.tensors.count(name)) {
      throw CaseFormatError(directory.string() + ": missing tensor '" + name + "' (" + name + ".npy)");
    }
  }
  return result;
}

void write_case(const std::filesystem::path& directory, const GoldenCase& golden_case) {
  const CaseHeader& h = golden_case.header;
  h.config.validate();
  std::set<std::string> expected;
  for (const auto& n : input_tensor_names(h.config)) expected.insert(n);
  for (const auto& n : output_tensor_names(h.config)) expected.insert(n);
  for (const auto& [name, array] : golden_case.tensors) {
    if (!expected.count(name)) throw CaseFormatError("write_case: extra tensor '" + name + "'");
    check_tensor(h, name, array);
  }
  for (const auto& name : expected) {
    if (!golden_case.tensors.count(name)) throw CaseFormatError("write_case: missing tensor '" + name + "'");
  }
  std::filesystem::create_directories(directory);
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const auto file = entry.path().filename();
    if (file != kCaseJson && file.extension() != ".npy") {
      throw CaseFormatError(directory.string() + ": refusing to write a case into a folder holding '" +
                            file.string() + "'");
    }
  }
  for (const auto& entry : std::filesystem::directory_iterator(directory)) std::filesystem::remove(entry.path());
  std::ofstream out(directory / kCaseJson);
  out << case_header_to_json(h).dump(2) << "\n";
  if (!out) throw CaseFormatError((directory / kCaseJson).string() + ": cannot write");
  for (const auto& [name, array] : golden_case.tensors) write_npy(directory / (name + ".npy"), array);
}

}  // namespace moe::golden
