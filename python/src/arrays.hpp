// The two conversions every binding uses: numpy arrays <-> the golden format's NpyArray (so the binding reaches the
// oracle through golden/'s tensor mapping, as `moe-oracle golden verify` does), and Python values <-> JSON (so
// config dicts go through golden/'s strict case.json reader).
#pragma once

#include "formats/npy.hpp"
#include "reference/tensor.hpp"
#include "reference/tolerance.hpp"

#include <nlohmann/json.hpp>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <string>
#include <vector>

namespace moe::python {

namespace py = pybind11;

// The precision a layer call runs in, the library's Precision: float64 (the oracle's ground truth) or float32 (its
// float instantiation); any other dtype is a ValueError naming `name`.
Precision precision_of(py::handle array, const std::string& name);

// A numpy array (or anything np.asarray accepts) as an NpyArray of `dtype`, copied in C order. Reals: float64 or
// float32 (widened exactly); integers: any integer dtype (as int64); booleans: bool only. Any other kind of
// array is a ValueError naming `name`; nothing is converted across kinds.
formats::NpyArray npy_from_numpy(py::handle array, formats::NpyDtype dtype, const std::string& name);
// The golden dtype a numpy array's kind maps to (floating -> f8, integer -> i8, bool -> b1).
formats::NpyDtype npy_dtype_of(py::handle array, const std::string& name);

// Refuses (ValueError naming `name` and the first bad index) a real array holding NaN or ±inf: the oracle's
// answer to such input means nothing, and a comparison against it would blame the system under test.
void require_finite(const formats::NpyArray& array, const std::string& name);

// value.cast<T>() with pybind11's cast_error (a RuntimeError "Unable to cast …") turned into a ValueError that names
// the argument and the type expected.
template <typename T>
T cast_argument(py::handle value, const std::string& name, const std::string& expected) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw std::invalid_argument(name + " must be " + expected + ", got " +
                                py::repr(value).template cast<std::string>());
  }
}

// An integer argument of a binding: a Python int or a numpy integer in [lo, hi], returned as int64. A bool is refused
// although Python counts it an int (batch=True ran as batch 1), and so is every value outside the range (a negative
// size reached std::vector as 2^64 − 1: "cannot create std::vector larger than max_size()", bad_alloc). Each
// refusal is a ValueError naming `name`, as the other argument errors are.
std::int64_t int_argument(py::handle value, const std::string& name, std::int64_t lo, std::int64_t hi);
// A size or an index the C++ side holds in an int: int_argument in [lo, 2^31 − 1].
int int_argument(py::handle value, const std::string& name, int lo);
// A seed: every integer in [0, 2^64 − 1] (int_argument's rules; -1 was pybind11's "incompatible function arguments").
std::uint64_t seed_argument(py::handle value, const std::string& name);
// A list (or tuple) of int arguments, `name`[i] in messages.
std::vector<int> int_list_argument(py::handle value, const std::string& name, int lo);

// A new numpy array (C order): reals as float64, or float32 under Precision::float32 (the values came from a float
// computation, so the narrowing is exact).
py::array numpy_from_npy(const formats::NpyArray& array, Precision precision = Precision::float64);

// A copy of `size` values as a numpy array of the given shape (an Eigen row-major matrix is C order).
template <typename Scalar>
py::array numpy_copy(const Scalar* data, const std::vector<py::ssize_t>& shape) {
  py::array_t<Scalar> a(shape);
  std::copy(data, data + a.size(), a.mutable_data());
  return py::array(std::move(a));
}
template <typename M>
py::array numpy_from_matrix(const M& m) {
  return numpy_copy(m.data(), {static_cast<py::ssize_t>(m.rows()), static_cast<py::ssize_t>(m.cols())});
}
template <typename Scalar>
py::array numpy_from_vector(const std::vector<Scalar>& v) {
  return numpy_copy(v.data(), {static_cast<py::ssize_t>(v.size())});
}
template <typename T>
py::array numpy_from_vector(const Vector<T>& v) {
  return numpy_copy(v.data(), {static_cast<py::ssize_t>(v.size())});
}

// Python dict/list/tuple/str/bool/int/float/None (numpy scalars too) -> JSON; dict keys must be strings. `where`
// names the value in error messages. Containers nest at most storage::kMaxJsonDepth (64) deep, as in every JSON
// file read; a container that contains itself, and an integer outside [-2^63, 2^64), are refused (ValueError).
nlohmann::json json_from_python(py::handle value, const std::string& where);
py::object python_from_json(const nlohmann::json& value);
py::object python_from_json(const nlohmann::ordered_json& value);

// "[3, 4]"
std::string shape_text(const std::vector<std::int64_t>& shape);

}  // namespace moe::python
