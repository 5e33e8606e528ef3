// The options a command was given, as distributed/comm/option_agreement.hpp compares them between the ranks of an
// mpirun job: each option given (count > 0), under its first long name, with its values as parsed text, in the
// order the command defines them, then those of the subcommand chosen. Options not given are not listed, so that
// ranks compare what their command lines said, not defaults.
#pragma once

#include "distributed/comm/option_agreement.hpp"

#include <CLI/CLI.hpp>

#include <vector>

namespace moe::cli {

inline void add_given_options(const CLI::App& cmd, std::vector<GivenOption>& out) {
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt->count() == 0) continue;
    std::string values;
    for (const std::string& v : opt->results()) values += (values.empty() ? "" : " ") + v;
    out.emplace_back(opt->get_name(), values);
  }
  for (const CLI::App* sub : cmd.get_subcommands()) {
    out.emplace_back(sub->get_name(), "(subcommand)");
    add_given_options(*sub, out);
  }
}

inline std::vector<GivenOption> given_options(const CLI::App& cmd) {
  std::vector<GivenOption> out;
  add_given_options(cmd, out);
  return out;
}

}  // namespace moe::cli
