// The element types a Communicator moves and reduces: a closed set, so that every backend supports all of them
// and a call can describe its buffers without templates (ElementType travels in CollectiveCall, and MPI maps it
// to an MPI_Datatype).
//
//   f64 = double (activations and gradients in the oracle's precision), f32 = float,
//   i64 = std::int64_t (token counts, splits, indices), i32 = std::int32_t.
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace moe {

enum class ElementType : std::int64_t { f64, f32, i64, i32 };

template <typename T>
concept CommElement =
    std::same_as<T, double> || std::same_as<T, float> || std::same_as<T, std::int64_t> || std::same_as<T, std::int32_t>;

template <CommElement T>
constexpr ElementType element_type_of() {
  if constexpr (std::same_as<T, double>)
    return ElementType::f64;
  else if constexpr (std::same_as<T, float>)
    return ElementType::f32;
  else if constexpr (std::same_as<T, std::int64_t>)
    return ElementType::i64;
  else
    return ElementType::i32;
}

// Calls f.template operator()<T>() with the C++ type of `type`: the one switch over element types.
template <typename F>
decltype(auto) visit_element_type(ElementType type, F&& f) {
  switch (type) {
    case ElementType::f64: return f.template operator()<double>();
    case ElementType::f32: return f.template operator()<float>();
    case ElementType::i64: return f.template operator()<std::int64_t>();
    case ElementType::i32: break;
  }
  return f.template operator()<std::int32_t>();
}

std::size_t element_size(ElementType type);
std::string_view element_type_name(ElementType type);
bool is_floating(ElementType type);

}  // namespace moe
