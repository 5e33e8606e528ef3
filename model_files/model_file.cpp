#include "model_files/model_file.hpp"

#include "formats/npy.hpp"
#include "formats/strict_json.hpp"
#include "golden/case_json.hpp"
#include "golden/model_case.hpp"
#include "model_files/hf_config.hpp"
#include "reference/model.hpp"
#include "storage/json_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <stdexcept>

namespace moe::model_files {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// An error whose message already names the file (the golden readers put their origin in front).
class NamedError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

// The shared reader's limits (a regular file, bounded size and depth, no key twice): a FIFO, /dev/zero or a
// 200,000-deep value is refused here, before any message echoes a value by dumping it recursively.
json parse_file(const fs::path& path) {
  try {
    return storage::read_json_file(path);
  } catch (const storage::StorageError& e) {
    throw NamedError(e.what());  // names the file already
  }
}

json parse_text(std::string_view text, const std::string& origin) {
  try {
    return storage::parse_json_text(text, origin);
  } catch (const storage::StorageError& e) {
    throw NamedError(e.what());  // names the origin already
  }
}

// The model's name when the file does not give one: its stem, or for the conventional names (config.json of a
// Hugging Face checkout, case.json of a golden case) the folder's.
std::string name_from_path(const fs::path& path) {
  const std::string stem = path.stem().string();
  const std::string folder = path.parent_path().filename().string();
  constexpr std::string_view kConventional[] = {"config", "case"};
  const bool conventional = std::find(std::begin(kConventional), std::end(kConventional), stem) != std::end(kConventional);
  return conventional && !folder.empty() ? folder : stem;
}

ModelFile from_ours(const json& root) {
  ModelFile out;
  out.source = std::string(kModelFormat);
  LayerPreset& m = out.model;
  formats::StrictObject top(root, std::string(kModelFormat));
  top.find("format");
  m.name = top.string("name", top.required("name"));
  if (m.name.empty()) throw std::invalid_argument("'name' must not be empty");
  m.description = top.optional_string("description").value_or("");
  m.config = formats::config_from_json(top.required("config"), /*semantics_key=*/true);
  m.num_layers = top.integer("num_layers", top.required("num_layers"));
  m.num_dense_layers = top.integer("num_dense_layers", 0);
  m.n_hash_layers = top.integer("n_hash_layers", 0);
  m.vocab = top.integer("vocab", top.required("vocab"));
  if (const json* a = top.find("attention"))  // absent: blocks without attention
    m.attention = formats::attention_from_json(*a, std::string(kModelFormat) + ": attention");
  // The run shape is optional: a full-size model is described by its layer and depth; 4096 × 1 is what the
  // full-size presets use.
  const json* seq = top.find("seq");
  const json* micro_batch = top.find("micro_batch");
  m.seq = seq ? top.integer("seq", *seq) : kDefaultSeq;
  m.batch = micro_batch ? top.integer("micro_batch", *micro_batch) : kDefaultMicroBatch;
  if (!seq) out.assumptions.push_back("seq absent: taken as " + std::to_string(kDefaultSeq));
  if (!micro_batch) out.assumptions.push_back("micro_batch absent: taken as " + std::to_string(kDefaultMicroBatch));
  top.reject_unknown();
  return out;
}

// A layer case is one MoE layer on one shape; it has no vocabulary unless it routes by hash, when its tid2eid.npy
// (beside case.json) has one row per token id.
ModelFile from_layer_case(const json& root, const fs::path& path, const std::string& format) {
  golden::CaseHeader h;
  try {
    h = golden::case_header_from_json(root, path.string());
  } catch (const golden::CaseFormatError& e) {
    throw NamedError(e.what());
  }
  ModelFile out;
  out.source = format;
  LayerPreset& m = out.model;
  m.name = name_from_path(path);
  m.description = h.description;
  m.config = h.config;
  m.seq = h.seq;
  m.batch = h.batch;
  m.num_layers = 1;
  out.assumptions.push_back("num_layers 1, no dense layer: a layer case is one MoE layer");
  if (h.config.hash_routing) {
    m.n_hash_layers = 1;
    out.assumptions.push_back("n_hash_layers 1: the case's layer routes by tid2eid");
    const fs::path table = path.parent_path() / "tid2eid.npy";
    if (fs::exists(table)) {
      formats::NpyArray a;
      try {
        a = formats::read_npy(table);
      } catch (const std::exception& e) {
        throw NamedError(e.what());
      }
      if (a.shape.size() != 2 || a.shape[0] < 1 || a.shape[0] > (1 << 30))
        throw NamedError(table.string() + ": tid2eid must be [vocab, topk], got " + a.shape_string());
      m.vocab = static_cast<int>(a.shape[0]);
      out.assumptions.push_back("vocab " + std::to_string(m.vocab) + ": the rows of the case's tid2eid.npy");
    } else {
      // A placeholder table sends id to (id + j) mod E: with fewer ids than experts some experts get no token.
      m.vocab = std::max(kDefaultCaseVocab, h.config.num_experts);
      out.assumptions.push_back("vocab " + std::to_string(m.vocab) + ": no tid2eid.npy beside case.json; " +
                                std::to_string(kDefaultCaseVocab) +
                                ", or num_experts when more, so that a placeholder table reaches every expert");
    }
  } else {
    m.vocab = kDefaultCaseVocab;
    out.assumptions.push_back("vocab " + std::to_string(kDefaultCaseVocab) +
                              ": a layer case has no vocabulary (only hash routing reads token ids)");
  }
  out.ignored.push_back("tolerance = {\"rtol\": " + json(h.tolerance.rtol).dump() +
                        ", \"atol\": " + json(h.tolerance.atol).dump() + "}: the case's comparison, not the model");
  return out;
}

ModelFile from_model_case(const json& root, const fs::path& path) {
  golden::ModelCaseHeader h;
  try {
    h = golden::model_case_header_from_json(root, path.string());
  } catch (const golden::CaseFormatError& e) {
    throw NamedError(e.what());
  }
  ModelFile out;
  out.source = std::string(golden::kModelCaseFormat);
  LayerPreset& m = out.model;
  m.name = name_from_path(path);
  m.description = h.description;
  m.config = h.model.layer;
  m.num_layers = h.model.num_layers;
  m.n_hash_layers = h.model.n_hash_layers;
  m.vocab = h.model.vocab;
  m.attention = h.model.attention;
  m.seq = h.seq;
  m.batch = h.micro_batch;
  out.ignored.push_back("model.rms_eps = " + json(h.model.rms_eps).dump() +
                        ": the RMSNorm around the MoE layers (a model description has no field for it)");
  out.ignored.push_back("layout = tp " + std::to_string(h.tp) + ", cp " + std::to_string(h.cp) + ", dp " +
                        std::to_string(h.dp) + ": the case's parallel layout, not the model");
  out.ignored.push_back("batch.size = " + std::to_string(h.global_batch) + ": the case's global batch");
  out.ignored.push_back("loss_mode = " + std::string(to_string(h.loss_mode)) + ": the case's loss mode");
  out.ignored.push_back("tolerance: the case's comparison, not the model");
  return out;
}

ModelFile read_any(const json& root, const fs::path& path, const Semantics& semantics) {
  if (!root.is_object()) throw std::invalid_argument("the top level must be a JSON object");
  if (const auto it = root.find("format"); it != root.end()) {
    if (!it->is_string()) throw std::invalid_argument("'format' must be a string");
    const std::string format = it->get<std::string>();
    if (format == kModelFormat) return from_ours(root);
    if (format == golden::kCaseFormat || format == golden::kCaseFormatV2) return from_layer_case(root, path, format);
    if (format == golden::kModelCaseFormat) return from_model_case(root, path);
    throw std::invalid_argument("'format' is \"" + format + "\": this build reads " + std::string(kModelFormat) +
                                ", moe-golden/1, moe-golden/2, moe-golden-model/1, or a Hugging Face config.json");
  }
  if (root.contains("model_type")) return model_from_hf_config(root, name_from_path(path), semantics);
  throw std::invalid_argument("neither 'format' (" + std::string(kModelFormat) +
                              ", a golden case) nor 'model_type' (a Hugging Face config.json)");
}

// What every format must give: a valid layer, at least one MoE layer, a run shape, and — through ModelConfig's
// rules — hash layers that are valid layers too.
void check_model(const LayerPreset& m) {
  if (m.num_layers < 1) throw std::invalid_argument("num_layers (MoE layers) must be >= 1");
  if (m.num_dense_layers < 0) throw std::invalid_argument("num_dense_layers must be >= 0");
  if (m.seq < 1) throw std::invalid_argument("seq must be >= 1");
  if (m.batch < 1) throw std::invalid_argument("micro_batch must be >= 1");
  ModelConfig model;
  model.layer = m.config;
  model.num_layers = m.num_layers;
  model.n_hash_layers = m.n_hash_layers;
  model.vocab = m.vocab;
  model.attention = m.attention;
  model.validate();
}

// `read` gives a model from one source; every format must pass check_model, and every error becomes one line that
// names `origin` once.
template <typename Read>
ModelFile read_checked(const std::string& origin, Read read) {
  try {
    ModelFile out = read();
    check_model(out.model);
    return out;
  } catch (const NamedError& e) {
    throw std::invalid_argument(one_line(e.what()));
  } catch (const std::exception& e) {
    throw std::invalid_argument(one_line(origin + ": " + e.what()));
  }
}

ModelFile from_hf(const json& root, const std::string& origin, const Semantics& semantics) {
  if (!root.is_object()) throw std::invalid_argument("the top level must be a JSON object");
  if (root.contains("format") || !root.contains("model_type"))
    throw std::invalid_argument("not a Hugging Face config.json (one has 'model_type' and no 'format')");
  return model_from_hf_config(root, name_from_path(origin), semantics);
}

}  // namespace

ModelFile read_model_file(const fs::path& path, const Semantics& semantics) {
  return read_checked(path.string(), [&] { return read_any(parse_file(path), path, semantics); });
}

ModelFile read_hf_config(const json& root, const std::string& origin, const Semantics& semantics) {
  return read_checked(origin, [&] { return from_hf(root, origin, semantics); });
}

ModelFile read_hf_config_text(std::string_view text, const std::string& origin, const Semantics& semantics) {
  return read_checked(origin, [&] { return from_hf(parse_text(text, origin), origin, semantics); });
}

std::string model_source(const std::string& origin, const ModelFile& file) { return origin + " (" + file.source + ")"; }

nlohmann::ordered_json model_file_json(const LayerPreset& m) {
  nlohmann::ordered_json j;
  j["format"] = std::string(kModelFormat);
  j["name"] = m.name;
  j["description"] = m.description;
  j["config"] = formats::config_to_json(m.config);
  j["config"]["semantics"] = m.config.semantics.spec();
  j["num_layers"] = m.num_layers;
  j["num_dense_layers"] = m.num_dense_layers;
  j["n_hash_layers"] = m.n_hash_layers;
  j["vocab"] = m.vocab;
  if (m.attention.heads > 0) j["attention"] = formats::attention_to_json(m.attention);
  j["seq"] = m.seq;
  j["micro_batch"] = m.batch;
  return j;
}

void write_model_file(const fs::path& path, const LayerPreset& m) {
  std::ofstream out(path, std::ios::binary);
  out << model_file_json(m).dump(2) << "\n";
  out.close();  // a full disk shows at the flush
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

}  // namespace moe::model_files
