// `moe-oracle semantics`: the catalogue of named deviations between pinned Megatron versions and the intended
// objective (reference/semantics.hpp), and which of them each profile turns on.
#include "cli/commands.hpp"
#include "cli/text_format.hpp"
#include "reference/semantics.hpp"

#include <nlohmann/json.hpp>

#include <iostream>
#include <memory>
#include <string>

namespace moe::cli {
namespace {

std::string modes(const DeviationInfo& d) {
  if (d.mean_modes && d.per_token_mode) return "sum, avg, per-token";
  return d.mean_modes ? "sum, avg" : "per-token";
}

nlohmann::json to_json(const DeviationInfo& d, const Semantics& semantics) {
  return {{"id", d.name},         {"kind", to_string(d.kind)},    {"on", semantics.has(d.id)},
          {"megatron", d.statement}, {"intended", d.intended},    {"source", d.megatron},
          {"upstream", d.upstream}, {"visible_when", d.visible},   {"loss_modes", modes(d)},
          {"changes_with_tp_cp", d.tp_cp_dependent}};
}

struct SemanticsOptions {
  std::string profile;  // empty: every profile, every deviation
  bool json = false;
};

void run(const SemanticsOptions& a) {
  const Semantics chosen = a.profile.empty() ? Semantics() : Semantics::parse(a.profile);
  if (a.json) {
    nlohmann::json out{{"moe_oracle", MOE_ORACLE_VERSION}};
    for (const auto& p : semantics_profiles()) {
      nlohmann::json ids = nlohmann::json::array();
      for (Deviation d : p.deviations) ids.push_back(deviation_info(d).name);
      out["profiles"].push_back({{"name", p.name}, {"pinned", p.pinned}, {"description", p.description},
                                 {"deviations", ids}});
    }
    if (!a.profile.empty()) out["semantics"] = chosen.spec();
    for (const auto& d : deviation_catalogue())
      if (a.profile.empty() || chosen.has(d.id)) out["deviations"].push_back(to_json(d, chosen));
    if (!out.contains("deviations")) out["deviations"] = nlohmann::json::array();
    std::cout << out.dump(2) << "\n";
    return;
  }
  std::cout << "profiles (a profile is a list of deviations; P,+id,-id turns single ones on or off):\n";
  TextTable profiles({"profile", "pinned", "deviations on"});
  for (const auto& p : semantics_profiles())
    profiles.add_row({std::string(p.name), std::string(p.pinned), std::to_string(p.deviations.size())});
  profiles.print(std::cout);
  if (!a.profile.empty()) std::cout << "\nsemantics " << chosen.spec() << ":\n";
  for (const auto& d : deviation_catalogue()) {
    if (!a.profile.empty() && !chosen.has(d.id)) continue;
    std::cout << "\n" << d.name << "  [" << to_string(d.kind) << "; " << modes(d) << "]\n"
              << "  megatron:  " << d.statement << "\n"
              << "  intended:  " << d.intended << "\n"
              << "  source:    " << d.megatron << "\n"
              << "  upstream:  " << d.upstream << "\n"
              << "  visible:   " << d.visible << "\n";
    if (a.profile.empty()) {
      std::string in;
      for (const auto& p : semantics_profiles())
        for (Deviation on : p.deviations)
          if (on == d.id) in += (in.empty() ? "" : ", ") + std::string(p.name);
      std::cout << "  profiles:  " << (in.empty() ? "none (turn on with ,+" + std::string(d.name) + ")" : in) << "\n";
    }
  }
  std::cout << "\nkinds: modelled = the oracle and the parallel system both compute it; replayed = torch's tie order, "
               "taken from a dump; scaling = a row of the scaling table; refused = Megatron raises, the oracle "
               "refuses\n";
}

}  // namespace

void add_semantics_command(CLI::App& app) {
  auto args = std::make_shared<SemanticsOptions>();
  auto* cmd = app.add_subcommand("semantics",
                                 "The named deviations between pinned Megatron-Core / transformers versions and the "
                                 "intended objective, and the profiles that turn them on");
  // --semantics as every other command spells it; --profile, the name this command had first, still works.
  cmd->add_option("--semantics,--profile", args->profile,
                  "list only the deviations this semantics turns on (intended, megatron-core-0.19, megatron-main, "
                  "hf-transformers-5.25; P,+deviation,-deviation)");
  cmd->add_flag("--json", args->json, "machine-readable output");
  cmd->callback([args] { run(*args); });
}

}  // namespace moe::cli
