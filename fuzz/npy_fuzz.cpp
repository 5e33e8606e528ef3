// Harness `npy`: formats::parse_npy, the strict .npy reader of golden cases, on the raw input bytes.
//
// Invariants beyond "no crash, no sanitizer report": the reader throws only NpyError; an array it accepts has as
// many values as its shape says, in the vector of its dtype; writing it back (serialize_npy) and reading that gives
// the same dtype, shape and bytes (the round trip `golden write` and `golden verify` rely on).
#include "formats/npy.hpp"
#include "fuzz/fuzz_support.hpp"
#include "fuzz/npy_invariants.hpp"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moe;
  const std::string_view bytes = fuzz::as_text(data, size);
  formats::NpyArray array;
  try {
    array = formats::parse_npy(bytes, "<fuzz>");
  } catch (const formats::NpyError&) {
    return 0;  // refused: what the reader is for
  }
  if (!fuzz::consistent(array))
    fuzz::finding("parse_npy returned " + std::to_string(fuzz::value_count(array)) + " values for shape " +
                  array.shape_string());
  formats::NpyArray again;
  try {
    again = formats::parse_npy(formats::serialize_npy(array), "<round trip>");
  } catch (const formats::NpyError& e) {
    fuzz::finding(std::string("an accepted array does not round-trip: ") + e.what());
  }
  if (!fuzz::same_array(array, again)) fuzz::finding("an accepted array reads back different after serialize_npy");
  return 0;
}
