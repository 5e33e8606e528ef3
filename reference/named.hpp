// Names of an enum's values, written once. An enum E with names declares, in its own namespace,
//   constexpr std::span<const Named<E>> names_of(E)      (the argument only selects the table)
// and everything that turns a value into text or text into a value reads that table: to_string, the parsers of
// the library's formats, the command line's choices and their help. A new value is then added in one place.
// A second vocabulary for the same enum (another framework's names for it) is a table of its own, passed as
// `table` to the same functions.
#pragma once

#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace moe {

template <typename E>
struct Named {
  E value;
  std::string_view name;
};

template <typename E>
constexpr std::span<const Named<E>> table_of() {
  return names_of(E{});
}

// The name of `value` (std::logic_error for a value the table lacks: a table left incomplete).
template <typename E>
constexpr std::string_view name_of(E value, std::type_identity_t<std::span<const Named<E>>> table = table_of<E>()) {
  for (const Named<E>& n : table)
    if (n.value == value) return n.name;
  throw std::logic_error("a value without a name in its enum's table");
}

// "alltoall, allgather, flex": the names in table order, for help texts and error messages.
template <typename E>
std::string name_list(std::span<const Named<E>> table = table_of<E>()) {
  std::string list;
  for (const Named<E>& n : table) list += (list.empty() ? "" : ", ") + std::string(n.name);
  return list;
}

// Every value, in table order (the dispatchers a check runs, the cases a test iterates).
template <typename E>
std::vector<E> all_values(std::span<const Named<E>> table = table_of<E>()) {
  std::vector<E> values;
  for (const Named<E>& n : table) values.push_back(n.value);
  return values;
}

// The value named `text`, if one is.
template <typename E>
constexpr std::optional<E> find_named(std::string_view text, std::span<const Named<E>> table = table_of<E>()) {
  for (const Named<E>& n : table)
    if (n.name == text) return n.value;
  return std::nullopt;
}

// The value named `text`; std::invalid_argument "unknown <what> '<text>' (<names>)" for any other text.
template <typename E>
E parse_named(std::string_view text, std::string_view what, std::span<const Named<E>> table = table_of<E>()) {
  if (const auto value = find_named(text, table)) return *value;
  throw std::invalid_argument("unknown " + std::string(what) + " '" + std::string(text) + "' (" + name_list(table) +
                              ")");
}

}  // namespace moe
