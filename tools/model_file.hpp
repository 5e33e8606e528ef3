// PLACEHOLDER until the model-files branch lands: the interface only.
#pragma once

#include "reference/presets.hpp"

#include <filesystem>
#include <string>
#include <vector>

namespace moe::cli {
struct ModelFile {
  LayerPreset model;
  std::string source;
  std::vector<std::string> assumptions;
  std::vector<std::string> ignored;
};
ModelFile read_model_file(const std::filesystem::path& path);
}  // namespace moe::cli
