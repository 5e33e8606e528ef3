#include "python/src/arrays.hpp"

#include "storage/json_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>

namespace moe::python {
namespace {

py::array as_array(py::handle value, const std::string& name) {
  py::array a = py::array::ensure(value);
  if (!a) {
    PyErr_Clear();
    throw std::invalid_argument(name + ": not convertible to a numpy array");
  }
  return a;
}

std::string dtype_text(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

std::vector<std::int64_t> shape_of(const py::array& a) {
  std::vector<std::int64_t> shape;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.push_back(a.shape(i));
  return shape;
}

// A C-ordered copy of `a` as Scalar (forcecast only within the kind already checked).
template <typename Scalar>
std::vector<Scalar> values_of(const py::array& a) {
  const auto c = py::array_t<Scalar, py::array::c_style | py::array::forcecast>::ensure(a);
  if (!c) throw py::error_already_set();
  return std::vector<Scalar>(c.data(), c.data() + c.size());
}

template <typename Json>
py::object to_python(const Json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return py::none();
    case nlohmann::json::value_t::boolean: return py::bool_(v.template get<bool>());
    case nlohmann::json::value_t::number_integer: return py::int_(v.template get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: return py::int_(v.template get<std::uint64_t>());
    case nlohmann::json::value_t::number_float: return py::float_(v.template get<double>());
    case nlohmann::json::value_t::string: return py::str(v.template get<std::string>());
    case nlohmann::json::value_t::array: {
      py::list list;
      for (const auto& item : v) list.append(to_python(item));
      return py::object(std::move(list));
    }
    case nlohmann::json::value_t::object: {
      py::dict dict;  // insertion order is kept, so an ordered_json object reads in its order
      for (const auto& [key, item] : v.items()) dict[py::str(key)] = to_python(item);
      return py::object(std::move(dict));
    }
    default: throw std::logic_error("python_from_json: unexpected JSON value");
  }
}

}  // namespace

Precision precision_of(py::handle value, const std::string& name) {
  const py::array a = as_array(value, name);
  if (a.dtype().kind() == 'f' && a.dtype().itemsize() == 8) return Precision::float64;
  if (a.dtype().kind() == 'f' && a.dtype().itemsize() == 4) return Precision::float32;
  throw std::invalid_argument(name + ": expected a float64 or float32 array, got " + dtype_text(a));
}

formats::NpyDtype npy_dtype_of(py::handle value, const std::string& name) {
  const py::array a = as_array(value, name);
  switch (a.dtype().kind()) {
    case 'f': return formats::NpyDtype::f8;
    case 'i':
    case 'u': return formats::NpyDtype::i8;
    case 'b': return formats::NpyDtype::b1;
    default: throw std::invalid_argument(name + ": arrays of " + dtype_text(a) + " have no golden dtype");
  }
}

formats::NpyArray npy_from_numpy(py::handle value, formats::NpyDtype dtype, const std::string& name) {
  const py::array a = as_array(value, name);
  const char kind = a.dtype().kind();
  const auto shape = shape_of(a);
  switch (dtype) {
    case formats::NpyDtype::f8:
      precision_of(a, name);
      return formats::NpyArray::of_reals(shape, values_of<double>(a));
    case formats::NpyDtype::i8:
      if (kind != 'i' && kind != 'u') throw std::invalid_argument(name + ": expected an integer array, got " + dtype_text(a));
      if (kind == 'u' && a.dtype().itemsize() == 8) {
        // uint64 past 2^63 − 1 has no <i8: the cast wrapped it (2^64 − 1 was written as −1).
        const auto wide = values_of<std::uint64_t>(a);
        std::vector<std::int64_t> narrow(wide.size());
        for (std::size_t i = 0; i < wide.size(); ++i) {
          if (wide[i] > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
            throw std::invalid_argument(name + ": value " + std::to_string(wide[i]) + " at flat index " +
                                        std::to_string(i) + " is past 2^63 - 1 (golden integers are int64)");
          narrow[i] = static_cast<std::int64_t>(wide[i]);
        }
        return formats::NpyArray::of_integers(shape, std::move(narrow));
      }
      return formats::NpyArray::of_integers(shape, values_of<std::int64_t>(a));
    case formats::NpyDtype::b1: {
      if (kind != 'b') throw std::invalid_argument(name + ": expected a bool array, got " + dtype_text(a));
      const auto flags = values_of<bool>(a);
      return formats::NpyArray::of_booleans(shape, std::vector<std::uint8_t>(flags.begin(), flags.end()));
    }
    case formats::NpyDtype::f4:
    case formats::NpyDtype::i4:
    case formats::NpyDtype::u2: break;  // dump-only dtypes (compare/): never a golden tensor's
  }
  throw std::logic_error("npy_from_numpy: unknown dtype");
}

py::array numpy_from_npy(const formats::NpyArray& array, Precision precision) {
  const std::vector<py::ssize_t> shape(array.shape.begin(), array.shape.end());
  switch (array.dtype) {
    case formats::NpyDtype::f8:
      if (precision == Precision::float64) return numpy_copy(array.reals.data(), shape);
      {
        const std::vector<float> narrowed(array.reals.begin(), array.reals.end());
        return numpy_copy(narrowed.data(), shape);
      }
    case formats::NpyDtype::i8: return numpy_copy(array.integers.data(), shape);
    case formats::NpyDtype::b1: {
      py::array_t<bool> flags(shape);
      std::transform(array.booleans.begin(), array.booleans.end(), flags.mutable_data(),
                     [](std::uint8_t b) { return b != 0; });
      return py::array(std::move(flags));
    }
    case formats::NpyDtype::f4:
    case formats::NpyDtype::i4:
    case formats::NpyDtype::u2: break;  // read_npy never returns these
  }
  throw std::logic_error("numpy_from_npy: unknown dtype");
}

namespace {

std::string type_name(py::handle value) { return py::str(py::type::of(value).attr("__name__")).cast<std::string>(); }

// The containers on the path from the root to the value being read: a container met again on its own path is a
// cycle (it would recurse until the stack overflows). Sibling references to one object are not cycles.
struct PathGuard {
  std::vector<PyObject*>& path;
  PathGuard(std::vector<PyObject*>& p, py::handle value, const std::string& where) : path(p) {
    if (std::find(path.begin(), path.end(), value.ptr()) != path.end())
      throw std::invalid_argument(where + ": the value contains itself (a reference cycle)");
    if (static_cast<int>(path.size()) >= storage::kMaxJsonDepth)
      throw std::invalid_argument(where + ": nested more than " + std::to_string(storage::kMaxJsonDepth) +
                                  " levels deep");
    path.push_back(value.ptr());
  }
  ~PathGuard() { path.pop_back(); }
  PathGuard(const PathGuard&) = delete;
  PathGuard& operator=(const PathGuard&) = delete;
};

// A Python int as a JSON integer: int64 range, or the unsigned range above it; anything wider is refused here
// rather than wrapped (pybind11's cast would raise "Unable to cast" as a RuntimeError).
nlohmann::json integer_from_python(py::handle value, const std::string& where) {
  const py::int_ i = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow == 0) return static_cast<std::int64_t>(v);
  if (overflow > 0) {
    const unsigned long long u = PyLong_AsUnsignedLongLong(i.ptr());
    if (!PyErr_Occurred()) return static_cast<std::uint64_t>(u);
    PyErr_Clear();
  }
  throw std::invalid_argument(where + ": integer " + py::str(py::handle(i)).cast<std::string>() + " is out of range");
}

nlohmann::json read_value(py::handle value, const std::string& where, std::vector<PyObject*>& path) {
  PyObject* p = value.ptr();
  if (value.is_none()) return nullptr;
  const py::module_ numpy = py::module_::import("numpy");
  if (PyBool_Check(p) || py::isinstance(value, numpy.attr("bool_"))) return value.cast<bool>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::dict>(value)) {
    const PathGuard guard(path, value, where);
    nlohmann::json object = nlohmann::json::object();
    for (const auto& [key, item] : value.cast<py::dict>()) {
      if (!py::isinstance<py::str>(key)) throw std::invalid_argument(where + ": dict keys must be strings");
      const auto k = key.cast<std::string>();
      object[k] = read_value(item, where + "." + k, path);
    }
    return object;
  }
  if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    const PathGuard guard(path, value, where);
    nlohmann::json array = nlohmann::json::array();
    for (const auto& item : value) array.push_back(read_value(item, where, path));
    return array;
  }
  if (PyLong_Check(p) || py::isinstance(value, numpy.attr("integer"))) return integer_from_python(value, where);
  if (PyFloat_Check(p) || py::isinstance(value, numpy.attr("floating"))) return value.cast<double>();
  throw std::invalid_argument(where + ": unsupported value of type " + type_name(value));
}

}  // namespace

nlohmann::json json_from_python(py::handle value, const std::string& where) {
  std::vector<PyObject*> path;
  return read_value(value, where, path);
}

py::object python_from_json(const nlohmann::json& value) { return to_python(value); }
py::object python_from_json(const nlohmann::ordered_json& value) { return to_python(value); }

void require_finite(const formats::NpyArray& array, const std::string& name) {
  for (std::size_t i = 0; i < array.reals.size(); ++i)
    if (!std::isfinite(array.reals[i]))
      throw std::invalid_argument(name + ": value " + std::to_string(array.reals[i]) + " at flat index " +
                                  std::to_string(i) + " is not finite (NaN and inf are refused)");
}

namespace {

// `value` as an exact Python int, or a ValueError naming `name`: bools and non-integers (floats, strings) refused.
py::int_ exact_integer(py::handle value, const std::string& name) {
  const py::module_ numpy = py::module_::import("numpy");
  const bool boolean = PyBool_Check(value.ptr()) || py::isinstance(value, numpy.attr("bool_"));
  const bool integer = PyLong_Check(value.ptr()) || py::isinstance(value, numpy.attr("integer"));
  if (boolean || !integer)
    throw std::invalid_argument(name + " must be an int, got " + py::repr(value).cast<std::string>() +
                                (boolean ? " (a bool)" : ""));
  auto i = py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr()));
  if (!i) throw py::error_already_set();
  return i;
}

[[noreturn]] void out_of_range(const std::string& name, const std::string& lo, const std::string& hi,
                               const py::int_& got) {
  throw std::invalid_argument(name + " must be in [" + lo + ", " + hi + "], got " + py::str(py::handle(got)).cast<std::string>());
}

}  // namespace

std::int64_t int_argument(py::handle value, const std::string& name, std::int64_t lo, std::int64_t hi) {
  const py::int_ i = exact_integer(value, name);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow != 0 || v < lo || v > hi) out_of_range(name, std::to_string(lo), std::to_string(hi), i);
  return static_cast<std::int64_t>(v);
}

int int_argument(py::handle value, const std::string& name, int lo) {
  return static_cast<int>(int_argument(value, name, lo, std::numeric_limits<int>::max()));
}

std::uint64_t seed_argument(py::handle value, const std::string& name) {
  const py::int_ i = exact_integer(value, name);
  const unsigned long long v = PyLong_AsUnsignedLongLong(i.ptr());  // refuses negatives and 2^64 and above
  if (PyErr_Occurred()) {
    PyErr_Clear();
    out_of_range(name, "0", std::to_string(std::numeric_limits<std::uint64_t>::max()), i);
  }
  return static_cast<std::uint64_t>(v);
}

std::vector<int> int_list_argument(py::handle value, const std::string& name, int lo) {
  if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value))
    throw std::invalid_argument(name + " must be a list of ints, got " + py::repr(value).cast<std::string>());
  std::vector<int> out;
  for (const auto item : value) out.push_back(int_argument(item, name + "[" + std::to_string(out.size()) + "]", lo));
  return out;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace moe::python
