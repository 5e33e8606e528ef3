// Harness `checkpoint`: dist::load_checkpoint on a checkpoint directory made from the input.
//
// At start the harness writes one real checkpoint (checkpoint_model.hpp) into a pristine folder and copies it to a
// work folder. An input replaces checkpoint.json and at most one piece file of the work folder:
//
//   byte 0         flags; bit 0: before writing, set the "fnv1a" of every piece whose "file" is the replaced one to
//                  the checksum of the new bytes (so that values, not only checksums, get through to the loader)
//   up to a NUL    checkpoint.json
//   up to a NUL    the name of the piece file to replace (empty or not a plain file name: none replaced)
//   the rest       that piece file's bytes
//
// After the load the work folder is restored. checkpoint_seeds.cpp writes a seed of this form for every piece of the
// real checkpoint.
//
// Invariants: only std::runtime_error is thrown; a load that succeeds read only files inside the folder (every
// "file" a plain name), and returned finite values and a tid2eid inside [0, E) (the router indexes experts with it).
// Each of these was broken before the loader treated checkpoints as untrusted input (issue 21).
#include "distributed/train/checkpoint.hpp"
#include "fuzz/checkpoint_model.hpp"
#include "fuzz/fuzz_support.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <stdexcept>
#include <string>

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A piece "file" that stays inside the checkpoint folder: a non-empty name of letters, digits and ". _ -", not "."
// or "..".
bool plain_file_name(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == "." || name == "..") return false;
  for (const char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

struct Folders {
  fs::path work;
  std::map<std::string, std::string> pristine;  // file name -> bytes
};

const Folders& folders() {
  static const Folders f = [] {
    Folders out;
    const fs::path pristine = moe::fuzz::scratch_dir() / "pristine";
    out.work = moe::fuzz::scratch_dir() / "work";
    moe::fuzz::write_checkpoint(pristine);
    fs::create_directories(out.work);
    for (const auto& entry : fs::directory_iterator(pristine)) {
      std::ifstream in(entry.path(), std::ios::binary);
      std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      moe::fuzz::write_file(out.work / entry.path().filename(), bytes);
      out.pristine.emplace(entry.path().filename().string(), std::move(bytes));
    }
    return out;
  }();
  return f;
}

// Sets the checksum of every piece stored in `file` to that of `bytes`; the text unchanged when it is not a
// checkpoint.json shape.
std::string with_checksums(std::string_view meta_text, const std::string& file, std::string_view bytes) {
  json meta = json::parse(meta_text, nullptr, /*allow_exceptions=*/false);
  if (!meta.is_object() || !meta.contains("pieces") || !meta["pieces"].is_array()) return std::string(meta_text);
  for (json& piece : meta["pieces"])
    if (piece.is_object() && piece.contains("file") && piece["file"] == file) piece["fnv1a"] = moe::fuzz::fnv1a(bytes);
  return meta.dump();
}

void check_loaded(const moe::dist::TrainingState& state, const json& meta) {
  for (const json& piece : meta.at("pieces"))
    if (!plain_file_name(piece.at("file").get<std::string>()))
      moe::fuzz::finding("load_checkpoint accepted a piece outside its folder: " + piece.at("file").dump());
  const int experts = moe::fuzz::checkpoint_model().layer.num_experts;
  for (const auto& layer : state.params.layers)
    for (Eigen::Index i = 0; i < layer.tid2eid.size(); ++i)
      if (layer.tid2eid.data()[i] < 0 || layer.tid2eid.data()[i] >= experts)
        moe::fuzz::finding("load_checkpoint accepted tid2eid entry " + std::to_string(layer.tid2eid.data()[i]) +
                           " outside [0, " + std::to_string(experts) + ")");
  for (const auto* params : {&state.params, &state.adam_m, &state.adam_v}) {
    const auto finite = [](const auto& m) { return m.size() == 0 || m.allFinite(); };
    bool ok = finite(params->embedding) && finite(params->head) && finite(params->final_norm);
    for (const auto& layer : params->layers) {
      ok = ok && finite(layer.router_weight) && finite(layer.expert_bias) && finite(layer.shared_fc1) &&
           finite(layer.shared_fc2) && finite(layer.shared_gate) && finite(layer.latent_down) &&
           finite(layer.latent_up);
      for (const auto& w : layer.expert_fc1) ok = ok && finite(w);
      for (const auto& w : layer.expert_fc2) ok = ok && finite(w);
    }
    for (const auto& w : params->block_norm) ok = ok && finite(w);
    if (!ok) moe::fuzz::finding("load_checkpoint accepted a value that is not finite");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moe;
  if (size == 0) return 0;
  const Folders& f = folders();
  const std::uint8_t flags = data[0];
  const std::string_view rest = fuzz::as_text(data + 1, size - 1);
  const std::size_t json_end = std::min(rest.find('\0'), rest.size());
  const std::string_view meta_text = rest.substr(0, json_end);
  std::string_view tail = json_end < rest.size() ? rest.substr(json_end + 1) : std::string_view();
  const std::size_t name_end = std::min(tail.find('\0'), tail.size());
  const std::string name(tail.substr(0, name_end));
  const std::string_view piece = name_end < tail.size() ? tail.substr(name_end + 1) : std::string_view();
  const bool replace = plain_file_name(name) && name != "checkpoint.json";

  const std::string meta =
      replace && (flags & 1) ? with_checksums(meta_text, name, piece) : std::string(meta_text);
  const json parsed = json::parse(meta, nullptr, /*allow_exceptions=*/false);

  fuzz::write_file(f.work / "checkpoint.json", meta);
  if (replace) fuzz::write_file(f.work / name, piece);
  try {
    const dist::TrainingState state = dist::load_checkpoint(f.work.string(), fuzz::checkpoint_model());
    check_loaded(state, parsed);
  } catch (const std::runtime_error&) {
  }
  if (replace) {
    const auto original = f.pristine.find(name);
    if (original != f.pristine.end()) {
      fuzz::write_file(f.work / name, original->second);
    } else {
      std::error_code ec;
      fs::remove(f.work / name, ec);
    }
  }
  return 0;
}
