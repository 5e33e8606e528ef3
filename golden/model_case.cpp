#include "golden/model_case.hpp"

#include "formats/strict_json.hpp"
#include "golden/case_files.hpp"

#include <nlohmann/json.hpp>

#include <set>
#include <stdexcept>
#include <string>

namespace moe::golden {
namespace {

using nlohmann::json;

ModelCaseHeader parse_header(const json& root, const std::string& origin) {
  formats::StrictObject top(root, origin);
  top.find("format");  // checked by the caller
  ModelCaseHeader h;
  h.description = top.optional_string("description").value_or("");
  h.model.layer = formats::config_from_json(top.required("config"));

  formats::StrictObject model(top.required("model"), origin + ": model");
  h.model.num_layers = model.integer("num_layers", model.required("num_layers"));
  h.model.n_hash_layers = model.integer("n_hash_layers", 0);
  h.model.vocab = model.integer("vocab", model.required("vocab"));
  h.model.rms_eps = model.number("rms_eps", model.required("rms_eps"));
  if (const json* a = model.find("attention"))  // absent: blocks without attention
    h.model.attention = formats::attention_from_json(*a, origin + ": model.attention");
  h.model.mtp_depth = model.integer("mtp_depth", 0);  // absent: no multi-token prediction
  if (h.model.mtp_depth > 0) h.model.mtp_loss_scale = model.number("mtp_loss_scale", model.required("mtp_loss_scale"));
  model.reject_unknown();

  formats::StrictObject layout(top.required("layout"), origin + ": layout");
  h.tp = layout.integer("tp", 1);
  h.cp = layout.integer("cp", 1);
  h.dp = layout.integer("dp", 1);
  layout.reject_unknown();

  formats::StrictObject batch(top.required("batch"), origin + ": batch");
  h.seq = batch.integer("seq", batch.required("seq"));
  h.global_batch = batch.integer("size", batch.required("size"));
  h.micro_batch = batch.integer("micro_batch", batch.required("micro_batch"));
  batch.reject_unknown();

  h.loss_mode = parse_loss_mode(top.string("loss_mode", top.required("loss_mode")));

  h.tolerance = tolerance_from(top, origin);
  top.reject_unknown();
  return h;
}


ModelTensorSpec real(std::string trained, std::vector<std::int64_t> shape) {
  return {tensor_file_stem(trained), formats::NpyDtype::f8, std::move(shape), trained};
}

// Every trained parameter, in trained_tensors order (reference/model.cpp); the verifier checks the order against
// the oracle's list, so a renamed or reordered tensor there is an error, not a silent mismatch.
std::vector<ModelTensorSpec> trained_specs(const ModelCaseHeader& h) {
  const ModelConfig& m = h.model;
  const MoeConfig& c = m.layer;
  const std::int64_t H = c.hidden, V = m.vocab, E = c.num_experts, d = c.ffn_hidden, w = c.expert_width(),
                     ds = c.shared_expert_ffn_hidden, lat = c.latent_size;
  std::vector<ModelTensorSpec> specs{real("embedding", {V, H})};
  const std::int64_t qd = std::int64_t{m.attention.heads} * m.attention.head_dim,
                     kd = std::int64_t{m.attention.groups} * m.attention.head_dim;
  for (int l = 0; l < m.num_blocks(); ++l) {
    const std::string pre = m.block_prefix(l);
    const bool mtp = l >= m.num_layers;
    if (mtp) {
      specs.push_back(real(pre + "enorm", {H}));
      specs.push_back(real(pre + "hnorm", {H}));
      specs.push_back(real(pre + "eh_proj", {H, 2 * H}));
    }
    if (m.has_attention()) {
      specs.push_back(real(pre + "attention_norm", {H}));
      specs.push_back(real(pre + "attention_wq", {qd, H}));
      specs.push_back(real(pre + "attention_wk", {kd, H}));
      specs.push_back(real(pre + "attention_wv", {kd, H}));
      specs.push_back(real(pre + "attention_wo", {H, qd}));
    }
    specs.push_back(real(pre + "block_norm", {H}));
    specs.push_back(real(pre + "router_weight", {E, H}));
    for (int e = 0; e < c.num_experts; ++e) {
      specs.push_back(real(pre + "expert_fc1[" + std::to_string(e) + "]", {2 * d, w}));
      specs.push_back(real(pre + "expert_fc2[" + std::to_string(e) + "]", {w, d}));
    }
    if (c.has_shared_expert()) {
      specs.push_back(real(pre + "shared_fc1", {2 * ds, H}));
      specs.push_back(real(pre + "shared_fc2", {H, ds}));
    }
    if (c.shared_expert_gate) specs.push_back(real(pre + "shared_gate", {1, H}));
    if (lat > 0) {
      specs.push_back(real(pre + "latent_down", {lat, H}));
      specs.push_back(real(pre + "latent_up", {H, lat}));
    }
    if (mtp) specs.push_back(real(pre + "final_norm", {H}));
  }
  specs.push_back(real("final_norm", {H}));
  specs.push_back(real("head", {V, H}));
  return specs;
}

}  // namespace

ParallelLayout ModelCaseHeader::layout() const {
  // tp·cp·dp in 64 bits: a case claiming sizes whose product overflows int is refused, not wrapped.
  const auto fits = [](int size) { return size >= 1 && size <= kMaxWorld; };
  const long long world = fits(tp) && fits(cp) && fits(dp) ? static_cast<long long>(tp) * cp * dp : -1;
  if (world < 1 || world > kMaxWorld)
    throw std::invalid_argument("layout: tp, cp, dp must be >= 1 with tp·cp·dp at most " + std::to_string(kMaxWorld) +
                                " (got " + std::to_string(tp) + "·" + std::to_string(cp) + "·" + std::to_string(dp) +
                                ")");
  ParallelLayout l;
  l.world = static_cast<int>(world);
  l.tp = tp;
  l.cp = cp;
  return l;
}

std::string tensor_file_stem(std::string_view trained_name) {
  std::string stem;
  for (char ch : trained_name) {
    if (ch == '[') {
      stem += '.';
    } else if (ch != ']') {
      stem += ch;
    }
  }
  return stem;
}

std::vector<ModelTensorSpec> model_input_specs(const ModelCaseHeader& h) {
  const std::int64_t B = h.global_batch, S = h.seq;
  std::vector<ModelTensorSpec> specs{{"input_ids", formats::NpyDtype::i8, {B, S}, ""},
                                     {"labels", formats::NpyDtype::i8, {B, S}, ""},
                                     {"loss_mask", formats::NpyDtype::b1, {B, S}, ""}};
  const std::vector<ModelTensorSpec> trained = trained_specs(h);
  specs.insert(specs.end(), trained.begin(), trained.end());
  for (int l = 0; l < h.model.num_blocks(); ++l) {
    const MoeConfig lc = h.model.layer_config(l);
    const std::string pre = h.model.block_prefix(l);
    if (lc.expert_bias) specs.push_back({pre + "expert_bias", formats::NpyDtype::f8, {lc.num_experts}, ""});
    if (lc.hash_routing) specs.push_back({pre + "tid2eid", formats::NpyDtype::i8, {h.model.vocab, lc.topk}, ""});
  }
  return specs;
}

std::vector<ModelTensorSpec> model_output_specs(const ModelCaseHeader& h) {
  std::vector<ModelTensorSpec> specs;
  for (const char* scalar : {"objective", "ce_term", "aux_term", "z_term"})
    specs.push_back({scalar, formats::NpyDtype::f8, {}, ""});
  if (h.model.mtp_depth > 0) specs.push_back({"mtp_term", formats::NpyDtype::f8, {}, ""});
  specs.push_back({"ce_weights", formats::NpyDtype::f8, {h.global_batch, h.seq}, ""});
  for (const ModelTensorSpec& p : trained_specs(h)) specs.push_back({"grad." + p.stem, p.dtype, p.shape, p.trained});
  for (int l = 0; l < h.model.num_blocks(); ++l) {
    const MoeConfig lc = h.model.layer_config(l);
    const std::string pre = h.model.block_prefix(l);
    specs.push_back({pre + "bias_counts", formats::NpyDtype::i8, {lc.num_experts}, ""});
    if (lc.bias_update_rate) specs.push_back({pre + "expert_bias_updated", formats::NpyDtype::f8, {lc.num_experts}, ""});
  }
  return specs;
}

ModelCaseHeader model_case_header_from_json(const json& root, const std::string& origin) {
  const std::string version = case_format_of(root, origin);
  if (version != kModelCaseFormat) {
    throw CaseFormatError(origin + ": model case format '" + version + "' is not supported; this build reads '" +
                          std::string(kModelCaseFormat) + "'");
  }
  try {
    ModelCaseHeader h = parse_header(root, origin);
    // The rules global_step applies, checked once here so that a bad case is a format error naming the rule.
    h.model.validate();
    const ParallelLayout layout = h.layout();
    layout.validate();
    if (h.seq <= 0) throw std::invalid_argument("batch: seq must be > 0");
    num_microbatches(layout, h.global_batch, h.micro_batch);
    source_rank_partition(h.seq, h.micro_batch, h.cp, h.tp);
    return h;
  } catch (const std::invalid_argument& e) {  // the config, layout and batch rules
    throw CaseFormatError(origin + ": " + e.what());
  } catch (const CaseFormatError& e) {
    const std::string what = e.what();
    throw CaseFormatError(what.rfind(origin, 0) == 0 ? what : origin + ": " + what);
  }
}

ModelCase read_model_case(const std::filesystem::path& directory) {
  const json root = read_case_json(directory);
  ModelCase result;
  result.header = model_case_header_from_json(root, (directory / kCaseJson).string());
  std::map<std::string, ModelTensorSpec> specs;
  for (auto list : {model_input_specs(result.header), model_output_specs(result.header)})
    for (auto& s : list) specs.emplace(s.stem, std::move(s));
  std::set<std::string> expected;
  for (const auto& [stem, spec] : specs) expected.insert(stem);
  result.tensors = read_case_tensors(directory, expected, [&](const std::string& name, const formats::NpyArray& array) {
    const ModelTensorSpec& s = specs.at(name);
    check_dtype_and_shape(name, array, s.dtype, s.shape);
  });
  return result;
}

}  // namespace moe::golden
