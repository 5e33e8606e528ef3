// PLACEHOLDER until the model-files branch lands.
#include "tools/model_file.hpp"

#include <stdexcept>

namespace moe::cli {
ModelFile read_model_file(const std::filesystem::path& path) {
  throw std::invalid_argument(path.string() + ": model files are not read yet");
}
}  // namespace moe::cli
