// Harness `model_file`: model_files::read_model_file, the reader behind --model, on one file — ours (moe-model/1), a
// golden layer or model case.json, or a Hugging Face config.json (DeepSeek-V2/V3, Qwen2/Qwen3-MoE, Mixtral), told
// apart by content. The reader takes a path: each input is written to a scratch file first.
//
// Invariants: only std::invalid_argument is thrown (one line naming the file); a model it accepts, written in our
// format (model_file_json) and read back, is written identically — whatever format it came from.
#include "fuzz/fuzz_support.hpp"
#include "model_files/model_file.hpp"

#include <nlohmann/json.hpp>

#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moe;
  const std::string_view text = fuzz::as_text(data, size);
  const auto path = fuzz::scratch_dir() / "model.json";
  fuzz::write_file(path, text);
  model_files::ModelFile model;
  try {
    model = model_files::read_model_file(path);
  } catch (const std::invalid_argument&) {
    return 0;
  }
  const std::string once = model_files::model_file_json(model.model).dump();
  const auto again_path = fuzz::scratch_dir() / "again.json";
  fuzz::write_file(again_path, once);
  std::string twice;
  try {
    twice = model_files::model_file_json(model_files::read_model_file(again_path).model).dump();
  } catch (const std::invalid_argument& e) {
    fuzz::finding(std::string("an accepted model does not read back from our format: ") + e.what() + "\n" + once);
  }
  if (twice != once) fuzz::finding("a model changes when written in our format and read back:\n" + once + "\n" + twice);
  return 0;
}
