// Harness `npy_widened`: formats::read_npy_widened, the reader of other frameworks' dumps (compare/), which also
// takes '<f4', '<i4', '<u2' and '<V2'. It reads a path, so each input is written to a scratch file first.
//
// Invariants: only NpyError is thrown; an accepted array has as many values as its shape says; and on the files
// the strict reader accepts, the widened reader returns exactly what the strict one does (it only adds dtypes).
#include "formats/npy.hpp"
#include "fuzz/fuzz_support.hpp"
#include "fuzz/npy_invariants.hpp"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moe;
  const std::string_view bytes = fuzz::as_text(data, size);
  const auto path = fuzz::scratch_dir() / "dump.npy";
  fuzz::write_file(path, bytes);
  formats::NpyArray widened;
  try {
    widened = formats::read_npy_widened(path);
  } catch (const formats::NpyError&) {
    return 0;
  }
  if (!fuzz::consistent(widened))
    fuzz::finding("read_npy_widened returned " + std::to_string(fuzz::value_count(widened)) + " values for shape " +
                  widened.shape_string());
  formats::NpyArray strict;
  try {
    strict = formats::parse_npy(bytes, "<fuzz>");
  } catch (const formats::NpyError&) {
    return 0;  // a dtype only the widened reader takes
  }
  if (!fuzz::same_array(strict, widened))
    fuzz::finding("read_npy_widened and parse_npy read the same golden-format file differently");
  return 0;
}
