// An optional window into a dispatcher's intermediate buffers, for `moe-oracle step` (the teaching stepper).
//
// A dispatcher with an observer set reports, at each stage, the buffer it has just produced — the very matrix it
// goes on to use — and the counts it has just computed. Rows and their probabilities travel the same path as
// separate buffers, so a stage may be reported twice in a row under the same name: first the rows [R, w], then
// the probabilities ([R, 1], or [R, L] in Flex). Stage names are the dispatcher's own, e.g. "ep_alltoallv".
// Without an observer (the default) a report is one null-pointer test; nothing is copied.
#pragma once

#include "reference/tensor.hpp"

#include <cstdint>
#include <string_view>
#include <vector>

namespace moe::dist {

template <typename T>
class StageObserver {
 public:
  virtual ~StageObserver() = default;
  virtual void rows(std::string_view stage, const Matrix<T>& buffer) = 0;
  virtual void counts(std::string_view stage, const std::vector<std::int64_t>& values) = 0;
};

// What a dispatcher holds: the observer pointer and the two one-line report calls its stages make.
template <typename T>
class ObservedStages {
 public:
  void set_observer(StageObserver<T>* observer) { observer_ = observer; }

 protected:
  template <typename M>
  void observe(std::string_view stage, const M& buffer) const {
    if (observer_) observer_->rows(stage, Matrix<T>(buffer));
  }
  void observe_counts(std::string_view stage, const std::vector<std::int64_t>& values) const {
    if (observer_) observer_->counts(stage, values);
  }

 private:
  StageObserver<T>* observer_ = nullptr;
};

}  // namespace moe::dist
