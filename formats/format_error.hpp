// The error every reader of formats/ throws when a file or JSON object does not follow its format: one line naming
// the file or object, the key and what is wrong with it.
#pragma once

#include <stdexcept>

namespace moe::formats {

class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace moe::formats
