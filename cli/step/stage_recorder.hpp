// The StageObserver of `moe-oracle step`: keeps every buffer a dispatcher reports (distributed/dispatch/stage_observer.hpp)
// in order, grouped by the phase the stepper says it is in (dispatch, combine, combine_backward, …). The stepper
// reports its own stages (router, experts) through the same calls, so one list holds the whole walk.
#pragma once

#include "distributed/dispatch/stage_observer.hpp"

#include <string>
#include <vector>

namespace moe::step {

struct Record {
  std::string phase, name;
  bool is_counts = false;
  std::vector<std::int64_t> counts;
  std::vector<Matrix<double>> buffers;      // rows, then (optionally) their probabilities
  std::vector<std::int64_t> group_sizes;    // rows per local expert, when the buffer is grouped by expert
};

class StageRecorder final : public dist::StageObserver<double> {
 public:
  void begin_phase(std::string phase) { phase_ = std::move(phase); }

  // A second buffer under a name already reported in this phase, with as many rows and no partner yet, is that
  // buffer's probabilities (the observer's contract: rows first, then their probabilities).
  void rows(std::string_view stage, const Matrix<double>& buffer) override;
  void counts(std::string_view stage, const std::vector<std::int64_t>& values) override;
  // Marks the last buffer as grouped by local expert.
  void group(const std::vector<std::int64_t>& sizes);

  const std::vector<Record>& records() const { return records_; }

 private:
  std::string phase_;
  std::vector<Record> records_;
};

}  // namespace moe::step
