// Options whose values are names of an enum's values (reference/named.hpp): the text becomes the value when the
// command line is parsed, so a command holds the enum and never compares text; the help lists the names from the
// same table the library's to_string reads, and shows the default by name.
//   add_choice(cmd, "--optimizer", o.optimizer, "...")            the enum's own table
//   add_choice(cmd, "--dtype", o.dtype, "...", kDtypeNames)       another table for the same enum
//   add_choice(cmd, "--dispatcher", o.dispatcher, "...", "all")   std::optional: "all" (the default) leaves it unset
#pragma once

#include "reference/named.hpp"

#include <CLI/CLI.hpp>

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace moe::cli {

// Refuses a name the table lacks (or that is not `also`): "unknown value 'x' (a, b, c)", and `note` when given
// (what else the name might have meant). An empty value passes: the command line's global guard refuses it for
// every option (moe_oracle.cpp).
template <typename E>
CLI::Validator named_value(std::span<const Named<E>> table, std::string_view also = {}, std::string_view note = {}) {
  const std::string known = name_list(table) + (also.empty() ? "" : ", " + std::string(also));
  const std::string after = note.empty() ? "" : "; " + std::string(note);
  return CLI::Validator(
      [table, also = std::string(also), known, after](std::string& text) -> std::string {
        if (text.empty() || find_named(text, table) || (!also.empty() && text == also)) return {};
        return "unknown value '" + text + "' (" + known + ")" + after;
      },
      "{" + known + "}");
}

template <typename E>
CLI::Option* add_choice(CLI::App& cmd, const std::string& flags, E& value, const std::string& help,
                        std::span<const Named<E>> table = table_of<E>(), std::string_view note = {}) {
  return cmd
      .add_option_function<std::string>(
          flags, [&value, table](const std::string& text) { value = *find_named(text, table); }, help)
      ->check(named_value(table, {}, note))
      ->default_str(std::string(name_of(value, table)));
}

// Unset unless given; `unset_name` (e.g. "all"), when not empty, is also accepted and means unset, the default.
template <typename E>
CLI::Option* add_choice(CLI::App& cmd, const std::string& flags, std::optional<E>& value, const std::string& help,
                        std::string_view unset_name = {}, std::span<const Named<E>> table = table_of<E>()) {
  auto* option = cmd.add_option_function<std::string>(
      flags, [&value, table](const std::string& text) { value = find_named(text, table); }, help);
  option->check(named_value(table, unset_name));
  if (!unset_name.empty()) option->default_str(std::string(unset_name));
  return option;
}

}  // namespace moe::cli
