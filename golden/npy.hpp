// NumPy `.npy` files, format version 1.0 only, the three dtypes of the golden format (README.md, "Files"):
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

namespace moe::golden {

class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class NpyDtype { f8, i8, b1 };

std::string_view npy_descr(NpyDtype dtype);  // "<f8", "<i8", "|b1"

// One array. Exactly one of the three value vectors is used, the one of `dtype`, with size() elements in C order.
// An empty shape is a 0-d array (one element).
struct NpyArray {
  NpyDtype dtype = NpyDtype::f8;
  std::vector<std::int64_t> shape;
  std::vector<double> reals;
  std::vector<std::int64_t> integers;
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
std::string serialize_npy(const NpyArray& array);

NpyArray read_npy(const std::filesystem::path& path);
void write_npy(const std::filesystem::path& path, const NpyArray& array);

}  // namespace moe::golden
