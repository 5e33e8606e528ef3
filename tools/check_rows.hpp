// `moe-oracle check`'s settings, and the rows a run of them makes: the embedded default (check_suite.hpp) or the
// user's one configuration, each row with the options the command line gave and the rules of which features run
// together applied (refused where the user asked for the combination, adjusted with a note in the default set).
#pragma once

#include "reference/parallel_layout.hpp"
#include "tools/check_suite.hpp"
#include "tools/run_options.hpp"
#include "tools/side_by_side.hpp"

#include <string>
#include <vector>

namespace moe::cli {

struct CheckOptions {
  RunOptions run;
  ParallelLayout layout;  // world 0 = the built-in layouts
  std::string dispatcher = "all";
  std::string backend = "inproc";
  std::string kernels = "cpu";
  int steps = 0;          // 0: one step, gradients compared before any optimizer
  std::string resume_as;  // "world=4,ep=2,etp=2" (steps ≥ 2)
  std::string optimizer;  // empty: each row's own (adam, muon in the Muon row)
  std::string cp_comm_type;  // empty: each row's own (all_gather, p2p in the default set's p2p row)
  int jobs = hardware_jobs();  // in-process runs side by side
  bool distributed_optimizer = false;
  double clip_grad = 0;
  int hot_expert_slots = 0;  // replicated hot experts: replica slots per layer (0: each row's own)
  int expert_waves = 0;      // wave-scheduled EP: waves per layer (0: each row's own)
  std::string checkpoint_dir;  // empty: a fresh folder under the system's temporary directory, removed at the end
  bool own_checkpoint_dir = false;  // checkpoint_dir is that fresh folder (set when the command runs)
  std::string dtype = "double";
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
};

// The rows to run: the embedded default, or the user's one configuration over the first row's layouts or --world.
// For the user's configuration, a sequence length and global batch that the layouts' CP, SP and DP rules allow
// when they were not given, and the EP sizes --shrink must respect. Notes what it chose or left out in o.notes.
std::vector<CheckRow> rows_of(CheckOptions& o);

}  // namespace moe::cli
