#include "cli/step/stage_recorder.hpp"

#include <stdexcept>

namespace moe::step {

void StageRecorder::rows(std::string_view stage, const Matrix<double>& buffer) {
  for (auto& r : records_)
    if (r.phase == phase_ && r.name == stage && !r.is_counts && r.buffers.size() == 1 &&
        r.buffers[0].rows() == buffer.rows()) {
      r.buffers.push_back(buffer);
      return;
    }
  records_.push_back({phase_, std::string(stage), false, {}, {buffer}, {}});
}

void StageRecorder::counts(std::string_view stage, const std::vector<std::int64_t>& values) {
  records_.push_back({phase_, std::string(stage), true, values, {}, {}});
}

void StageRecorder::group(const std::vector<std::int64_t>& sizes) {
  if (records_.empty() || records_.back().is_counts)
    throw std::logic_error("step: expert groups must follow the buffer they group");
  records_.back().group_sizes = sizes;
}

}  // namespace moe::step
