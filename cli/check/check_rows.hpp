// `moe-oracle check`'s settings, and the rows a run of them makes: the embedded default (check_suite.hpp) or the
// user's one configuration, each row with the options the command line gave and the rules of which features run
// together applied (refused where the user asked for the combination, adjusted with a note in the default set).
#pragma once

#include "cli/check/check_suite.hpp"
#include "cli/kernel_choice.hpp"
#include "cli/rank_backend.hpp"
#include "cli/run_options.hpp"
#include "cli/side_by_side.hpp"
#include "reference/parallel_layout.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace moe::cli {

// --dtype: the precision the parallel system runs in, by check's names for it.
inline constexpr Named<Precision> kDtypeNames[] = {
    {Precision::float64, "double"}, {Precision::float32, "float"}, {Precision::bfloat16, "bf16"}};

// A flag that sets one RowSettings field of every row (--steps, --optimizer, …) and how it does.
struct RowFlag {
  const CLI::Option* option;
  std::function<void(const RowSettings& given, RowSettings& row)> apply;
};

struct CheckOptions {
  RunOptions run;
  ParallelLayout layout;  // world 0 = the built-in layouts
  std::optional<dist::DispatcherKind> dispatcher;  // unset: all of them
  Backend backend = Backend::inproc;
  Kernels kernels = Kernels::cpu;
  Precision dtype = Precision::float64;  // bf16: float arithmetic with bf16 storage (the model's bf16_storage)
  RowSettings row;                       // the row flags' values (add_row_flags)
  std::vector<RowFlag> row_flags;
  int jobs = hardware_jobs();  // in-process runs side by side
  std::string checkpoint_dir;  // empty: a fresh folder under the system's temporary directory, removed at the end
  bool own_checkpoint_dir = false;  // checkpoint_dir is that fresh folder (set when the command runs)
  double atol = 0, rtol = 0;  // unless given: the training-step row of reference/tolerance.hpp for the dtype
  bool tolerance_given = false;  // --atol or --rtol: also for Muon rows (else the muon_step row)
  bool json = false;
  std::string junit;                 // write JUnit XML here
  std::vector<std::string> filters;  // run only the runs whose name holds one of these
  bool custom_model = false;         // a model, batch or scaling flag was given: run it instead of the default rows
  bool custom_semantics = false;
  bool custom_quant = false;
  bool seq_given = false, global_batch_given = false;
  std::vector<std::string> notes;    // what was chosen for the user (defaults that fit the layout, shrinking)

  // Whether the row flag named `flag` ("--steps") was given.
  bool given(const std::string& flag) const;
};

// The flags that set a RowSettings field of every row, bound to o.row and listed in o.row_flags.
void add_row_flags(CLI::App& cmd, CheckOptions& o);

// The rows to run: the embedded default, or the user's one configuration over the first row's layouts or --world,
// with every rule of which features run together applied here (refused where the user asked for a combination,
// adjusted with a note in the default set): row flags, waves, replicas, GTP, --cp-comm-type and --dtype.
// For the user's configuration, a sequence length and global batch that the layouts' CP, SP and DP rules allow
// when they were not given, and the EP sizes --shrink must respect. Notes what it chose or left out in o.notes.
std::vector<CheckRow> rows_of(CheckOptions& o);

// Every option of `check` reaches the rows one of four ways, read off the declarations:
//   run options   (run_options.hpp) the model, batch and scaling: given, the check runs that model instead of the
//                 default set (--semantics and --quant apply to every default row instead)
//   row flags     (add_row_flags) set on every row through the row-flag registry, o.row_flags
//   layout flags  (add_layout_flags, and --vpp) the one layout every row runs, with --world
//   job options   kJobOptions: how the whole check runs and reports
// The options of `check` (the command as declared) that reach the rows none of these ways, and so would be parsed
// and ignored: none, or a test fails (cli/tests/check_options_test.cpp, which also plants one).
std::vector<std::string> options_reaching_no_row(const CLI::App& check);

// The options of `check` that act on the whole check, not on what a row computes.
inline constexpr const char* kJobOptions[] = {"--checkpoint-dir", "--dispatcher", "--backend", "--kernels", "--dtype",
                                              "--atol", "--rtol", "--json", "--junit", "--jobs", "--filter"};

// After parsing: which options were given (custom_model, custom_semantics, …), the layout finished, the combinations
// refused that need no rows to see, and the tolerances defaulted from the table for the dtype.
void finish_options(const CLI::App& check, CheckOptions& o);

}  // namespace moe::cli
