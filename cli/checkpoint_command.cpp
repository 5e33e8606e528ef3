// `moe-oracle checkpoint verify DIR`: a checkpoint folder written by `check --steps N --resume-as …` (format
// moe-checkpoint/1, distributed/train/checkpoint.hpp) checked as a whole without running anything. The model is
// read from checkpoint.json itself; then the loader checks every piece (a plain regular file of the folder, its
// size for its shape, its checksum, its place inside its tensor, finite values, second moments >= 0, tid2eid ids
// < E, no tid2eid row naming an expert twice) and that every tensor of the model is covered exactly once. A file in
// the folder that checkpoint.json does not list is a problem too. Exit 0 with a summary of what was verified; 2 with
// one line naming the first problem.
#include "cli/commands.hpp"
#include "distributed/train/checkpoint.hpp"
#include "golden/case_json.hpp"
#include "storage/durable_files.hpp"
#include "storage/json_file.hpp"
#include "storage/staged_directory.hpp"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>

namespace moe::cli {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The keys of checkpoint.json's "model" that belong to the model rather than to its MoE layers.
const std::set<std::string> kModelKeys{"num_layers", "n_hash_layers", "vocab", "rms_eps", "mtp_depth",
                                       "mtp_loss_scale", "attention"};

// Rules quote checkpoint.json's strings and the folder's names: control characters in them are written as \xNN, so
// that a file cannot break or forge the line (or move the terminal's cursor).
[[noreturn]] void refuse(const fs::path& meta, const std::string& rule) {
  throw std::invalid_argument("checkpoint: " + storage::one_line(meta.string() + ": " + rule));
}

int whole(const fs::path& meta, const json& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end()) refuse(meta, "'model' has no '" + key + "'");
  if (!it->is_number_integer() || it->get<std::int64_t>() < 0 ||
      it->get<std::int64_t>() > std::numeric_limits<int>::max())
    refuse(meta, "'model': '" + key + "' must be an integer in [0, 2^31), not " + it->dump());
  return static_cast<int>(it->get<std::int64_t>());
}

double real(const fs::path& meta, const json& object, const std::string& key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number()) refuse(meta, "'model': '" + key + "' must be a number");
  return it->get<double>();
}

// The model a checkpoint was written for, from its checkpoint.json (the loader then compares it key by key).
ModelConfig model_of(const fs::path& meta_path, const json& meta) {
  if (!meta.is_object() || !meta.contains("model") || !meta.at("model").is_object())
    refuse(meta_path, "'model' must be a JSON object");
  const json& model = meta.at("model");
  json layer = json::object();
  for (const auto& [key, value] : model.items())
    if (!kModelKeys.count(key)) layer[key] = value;
  ModelConfig m;
  try {
    m.layer = formats::config_from_json(layer);
  } catch (const std::exception& e) {
    refuse(meta_path, std::string("'model': ") + e.what());
  }
  m.num_layers = whole(meta_path, model, "num_layers");
  m.n_hash_layers = whole(meta_path, model, "n_hash_layers");
  m.vocab = whole(meta_path, model, "vocab");
  m.rms_eps = real(meta_path, model, "rms_eps");
  if (model.contains("mtp_depth")) {
    m.mtp_depth = whole(meta_path, model, "mtp_depth");
    m.mtp_loss_scale = real(meta_path, model, "mtp_loss_scale");
  }
  if (model.contains("attention")) {
    try {
      m.attention = formats::attention_from_json(model.at("attention"), "'model': 'attention'");
    } catch (const golden::CaseFormatError& e) {
      refuse(meta_path, e.what());
    }
  }
  try {
    m.validate();
  } catch (const std::invalid_argument& e) {
    refuse(meta_path, std::string("'model' is not a valid model: ") + e.what());
  }
  return m;
}

void verify(const std::string& dir, bool as_json) {
  const fs::path folder(dir);
  const fs::path meta_path = folder / "checkpoint.json";
  json meta;
  try {
    storage::StagedDirectory::recover(folder);  // as the loader does: a folder an interrupted write left aside
    meta = storage::read_json_file(meta_path);
  } catch (const storage::StorageError& e) {
    throw std::invalid_argument(std::string("checkpoint: ") + e.what());
  }
  const ModelConfig model = model_of(meta_path, meta);
  const dist::TrainingState state = dist::load_checkpoint(dir, model);  // every piece, every tensor

  // Files of the folder that checkpoint.json does not list.
  std::set<std::string> listed{"checkpoint.json"};
  for (const json& p : meta.at("pieces")) listed.insert(p.at("file").get<std::string>());
  for (const auto& e : fs::directory_iterator(folder))
    if (!listed.count(e.path().filename().string()))
      throw std::invalid_argument("checkpoint: " + storage::one_line(e.path().string()) +
                                  ": not a piece listed in checkpoint.json");

  std::set<std::string> tensors;
  std::uintmax_t bytes = 0;
  for (const json& p : meta.at("pieces")) {
    tensors.insert(p.at("tensor").get<std::string>());
    bytes += fs::file_size(folder / p.at("file").get<std::string>());
  }
  const std::string moments = !state.has_moments ? std::string("none") : std::string(to_string(state.moments_of));
  if (as_json) {
    std::cout << json{{"moe_oracle", MOE_ORACLE_VERSION}, {"checkpoint", dir}, {"verified", true},
                      {"pieces", meta.at("pieces").size()}, {"tensors", tensors.size()}, {"bytes", bytes},
                      {"training_step", state.training_step}, {"optimizer_step", state.optimizer_step},
                      {"moments", moments}, {"layers", model.num_layers}, {"mtp_depth", model.mtp_depth}}
                     .dump(2)
              << "\n";
    return;
  }
  std::cout << "checkpoint " << storage::one_line(dir) << ": verified\n"
            << "  " << meta.at("pieces").size() << " pieces (" << bytes << " bytes) covering " << tensors.size()
            << " tensors exactly once: sizes, shapes, checksums, finite values\n"
            << "  model: " << model.num_layers << " layers (" << model.n_hash_layers << " hash), h "
            << model.layer.hidden << ", E " << model.layer.num_experts << ", k " << model.layer.topk << ", vocab "
            << model.vocab << (model.mtp_depth > 0 ? ", MTP depth " + std::to_string(model.mtp_depth) : "")
            << (model.has_attention() ? ", attention" : "") << "\n"
            << "  training step " << state.training_step << ", optimizer step " << state.optimizer_step
            << ", moments: " << moments << "\n";
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("checkpoint", "Checkpoint folders written by `check --steps N --resume-as …`");
  cmd->require_subcommand(1);
  auto dir = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  auto* v = cmd->add_subcommand(
      "verify",
      "Check every piece of a checkpoint folder against its checkpoint.json (present, size and shape, checksum, "
      "finite, every tensor covered once, no unlisted file); exit 0 with a summary, 2 naming the first problem");
  v->add_option("DIR", *dir, "the checkpoint folder")->required();
  v->add_flag("--json", *as_json, "machine-readable summary");
  v->callback([dir, as_json] { verify(*dir, *as_json); });
}

}  // namespace moe::cli
