// NumPy `.npy` files, format version 1.0 only, the three dtypes of the golden format (golden/README.md, "Files"):
// `<f8` (double), `<i8` (int64), `|b1` (bool), C order, little-endian.
//
// File layout: "\x93NUMPY" | major=1 | minor=0 | uint16 LE header length | header | data.
// The header is a Python dict literal, e.g. {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }
// padded with spaces and ended by '\n'. Anything else (another dtype or version, Fortran order, a short or
// long data section) is refused with NpyError naming the file and the problem; nothing is converted silently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace moe::formats {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// f8, i8, b1: the golden format. f4, i4, u2: only through read_npy_widened (framework dumps, compare/); u2 holds
// raw 16-bit words (bfloat16 bits: numpy has no bfloat16, so dumps store it as uint16 or as ml_dtypes' '<V2').
enum class NpyDtype { f8, i8, b1, f4, i4, u2 };

std::string_view npy_descr(NpyDtype dtype);  // "<f8", "<i8", "|b1"

// One array. Exactly one of the three value vectors is used, the one of `dtype`, with size() elements in C order.
// An empty shape is a 0-d array (one element).
struct NpyArray {
  NpyDtype dtype = NpyDtype::f8;
  std::vector<std::int64_t> shape;
  std::vector<double> reals;           // f8, f4 (widened exactly)
  std::vector<std::int64_t> integers;  // i8, i4, u2 (widened exactly)
  std::vector<std::uint8_t> booleans;  // 0 or 1

  std::int64_t size() const;  // product of the shape
  std::string shape_string() const;  // "[3, 4]"
  // The values as doubles, whatever the dtype (for comparisons).
  std::vector<double> as_doubles() const;

  static NpyArray of_reals(std::vector<std::int64_t> shape, std::vector<double> values);
  static NpyArray of_integers(std::vector<std::int64_t> shape, std::vector<std::int64_t> values);
  static NpyArray of_booleans(std::vector<std::int64_t> shape, std::vector<std::uint8_t> values);
};

// `origin` names the source in error messages (a file path, or "<memory>").
NpyArray parse_npy(std::string_view bytes, const std::string& origin);
// f8, i8, b1 (the golden format) and f4 (framework dumps made by tests; each value must be a float exactly).
std::string serialize_npy(const NpyArray& array);

NpyArray read_npy(const std::filesystem::path& path);
// Also '<f4', '<i4', '<u2' and '<V2' (read as u2), widened exactly to double / int64: for dumps of other frameworks,
// never for golden cases.
NpyArray read_npy_widened(const std::filesystem::path& path);
// The dtype and shape of a file read_npy_widened would accept, from its header alone, with the file's size checked
// against them (a truncated or over-long file is refused): what a reader checks before it allocates anything.
struct NpyHeader {
  NpyDtype dtype = NpyDtype::f8;
  std::vector<std::int64_t> shape;
};
NpyHeader read_npy_header_widened(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const NpyArray& array);

}  // namespace moe::formats
