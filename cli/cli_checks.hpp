// Checks of command-line values, with plain messages. CLI11's PositiveNumber is a range over doubles: refusing 0 it
// printed "Value 0 not in range 0.000000 to 17976931348623157…" (309 digits, and 0 is in that range); its integer
// conversion read "-1", "18446744073709551616" and "1e23" all as the seed 2^64 − 1. Each check here says the rule
// in words, and CLI11 puts the option's name in front ("--world: must be a whole number >= 1, got '0'").
// An empty value passes each of them: the global guard (moe_oracle.cpp) refuses it for every option, in one place.
#pragma once

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace moe::cli {

// Decimal digits only: no sign, no exponent, no fraction, no hex.
inline bool all_digits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

// A count: a whole number in decimal, at least `min` (0 or 1). Whether it fits its type is the conversion's check.
inline CLI::Validator whole_at_least(int min) {
  const std::string rule = "must be a whole number >= " + std::to_string(min);
  return CLI::Validator(
      [min, rule](std::string& value) -> std::string {
        if (value.empty()) return {};
        if (!all_digits(value) || (min >= 1 && value.find_first_not_of('0') == std::string::npos))
          return rule + ", got '" + value + "'";
        return {};
      },
      min >= 1 ? "INT>=1" : "INT>=0");
}

// A real number > 0 (positive) or >= 0; finiteness is the command line's global guard (moe_oracle.cpp).
inline CLI::Validator real_above_zero(bool zero_allowed) {
  const std::string rule = zero_allowed ? "must be a number >= 0" : "must be a number > 0";
  return CLI::Validator(
      [zero_allowed, rule](std::string& value) -> std::string {
        if (value.empty()) return {};
        char* end = nullptr;
        const double x = std::strtod(value.c_str(), &end);
        if (end == value.c_str() || *end != '\0' || x < 0 || (!zero_allowed && x == 0))
          return rule + ", got '" + value + "'";
        return {};
      },
      zero_allowed ? "NUMBER>=0" : "NUMBER>0");
}

// A seed: exactly the integers 0 … 2^64 − 1, written in decimal.
inline CLI::Validator seed_value() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value.empty()) return {};
        errno = 0;
        if (all_digits(value)) {
          std::strtoull(value.c_str(), nullptr, 10);
          if (errno != ERANGE) return {};
        }
        return "must be a whole number from 0 to 18446744073709551615 written in decimal, got '" + value + "'";
      },
      "SEED");
}

}  // namespace moe::cli
