#include "distributed/comm/element_type.hpp"

namespace moe {

std::size_t element_size(ElementType type) {
  return visit_element_type(type, []<typename T>() { return sizeof(T); });
}

std::string_view element_type_name(ElementType type) {
  switch (type) {
    case ElementType::f64: return "f64";
    case ElementType::f32: return "f32";
    case ElementType::i64: return "i64";
    case ElementType::i32: break;
  }
  return "i32";
}

bool is_floating(ElementType type) { return type == ElementType::f64 || type == ElementType::f32; }

}  // namespace moe
