// Every option of `check` reaches the rows (check_rows.hpp, options_reaching_no_row): declared as a run option, a
// row flag in the registry, a layout flag or a job option. An option of none of these kinds would be parsed and
// then ignored, so a check given it would judge something other than what the user asked for.
#include "cli/check/check_rows.hpp"
#include "cli/commands.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace moe::cli {
namespace {

CLI::App* check_command(CLI::App& app) {
  add_check_command(app);
  return app.get_subcommand("check");
}

TEST(CheckOptions, EveryOptionReachesTheRows) {
  CLI::App app;
  const std::vector<std::string> none = options_reaching_no_row(*check_command(app));
  EXPECT_TRUE(none.empty()) << "options of check that reach no row: " << testing::PrintToString(none);
}

// The test's teeth: an option declared on check and known to none of the four kinds is named, whether it is new
// (--fake-knob) or looks like a row flag without being in the registry (--steps-per-row: add_option without sets).
TEST(CheckOptions, APlantedOptionIsFound) {
  for (const char* planted : {"--fake-knob", "--steps-per-row"}) {
    CLI::App app;
    CLI::App* check = check_command(app);
    int value = 0;
    check->add_option(planted, value, "declared on check and read by nothing");
    EXPECT_EQ(options_reaching_no_row(*check), std::vector<std::string>{planted});
  }
}

// Every job option named in kJobOptions is an option of check: the list holds no stale name.
TEST(CheckOptions, EveryJobOptionIsDeclared) {
  CLI::App app;
  CLI::App* check = check_command(app);
  for (const char* name : kJobOptions) {
    const auto& options = check->get_options();
    EXPECT_TRUE(std::any_of(options.begin(), options.end(),
                            [&](const CLI::Option* o) { return o->get_name() == name; }))
        << name << " is in kJobOptions but not an option of check";
  }
}

}  // namespace
}  // namespace moe::cli
