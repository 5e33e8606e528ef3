// `moe-oracle check` — the main job: run the parallel MoE system (forward, backward, gradient sync, expert-bias
// update) for each layout × dispatcher and compare every rank's objective, gradient shards and biases with the
// global step oracle. Exit status 1 on any mismatch, naming the first differing tensor, rank and index.
//
// With no model or layout flags it runs the embedded default (check_suite.hpp): test-size models that between
// them use every option of the oracle, with uneven padding, over layouts (world ≤ 8) that exercise EP, ETP, TP+SP,
// CP, PP, EDP > 1 and every dispatcher, under the intended semantics and the Megatron profiles, with a resumed
// multi-step run; it prints the features it covered. --semantics P runs that set under P. Model or layout flags
// run one configuration instead. Under `mpirun -np N … --backend mpi` the ranks are processes; a layout smaller
// than N runs on the first ranks while the others wait.
// --steps N runs N whole training steps (optimizer and bias update included) against the oracle's trajectory;
// --resume-as saves after N/2 steps and continues under another layout from the checkpoint.
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <span>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>

#include "distributed/differential_check.hpp"
#include "distributed/mpi_communicator.hpp"
#include "distributed/mpi_runtime.hpp"
#include "tools/check_suite.hpp"
#include "tools/commands.hpp"
#include "tools/kernel_choice.hpp"
#include "tools/layout_options.hpp"

namespace moe::cli {
namespace {

struct CheckOptions {
  RunOptions run;
  ParallelLayout layout;  // world 0 = the built-in layouts
  std::string dispatcher = "all";
  std::string backend = "inproc";
  std::string kernels = "cpu";
  int steps = 0;          // 0: one step, gradients compared before any optimizer
  std::string resume_as;  // "world=4,ep=2,etp=2" (steps ≥ 2)
  std::string optimizer = "adam";
  bool distributed_optimizer = false;
  std::string checkpoint_dir;  // empty: a fresh folder under the system's temporary directory, removed at the end
  std::string dtype = "double";
  double atol = -1, rtol = -1;  // < 0: the dtype's default (DESIGN §3)
  bool json = false;
  bool custom_model = false;    // a model, batch or scaling flag was given: run it instead of the default rows
  bool custom_semantics = false;
};

// The rows to run: the embedded default, or the user's one configuration over the first row's layouts or --world.
std::vector<CheckRow> rows_of(const CheckOptions& o) {
  std::vector<CheckRow> rows;
  if (o.custom_model || o.layout.world > 0) {
    CheckRow row{o.run.preset, o.run, default_rows().front().layouts};
    if (o.layout.world > 0) row.layouts = {o.layout};
    rows.push_back(row);
  } else {
    rows = default_rows();
  }
  for (CheckRow& r : rows) {
    if (o.custom_semantics) r.run.semantics = o.run.semantics;
    if (o.steps > 0) r.steps = o.steps;
    if (!o.resume_as.empty()) r.resume_as = o.resume_as;
    if (r.steps < 2) r.resume_as.clear();
    r.distributed_optimizer = r.distributed_optimizer || o.distributed_optimizer;
  }
  return rows;
}

struct Run {
  const CheckRow* row;
  ParallelLayout layout;
  dist::DispatcherKind dispatcher;
  dist::RankComparison result;
  double seconds = 0;
};

std::string row_label(const CheckRow& r) {
  std::string label = r.name + " " + r.run.scaling + " b" + std::to_string(r.run.micro_batch);
  if (r.steps > 0)
    label += " " + std::to_string(r.steps) + " steps" + (r.distributed_optimizer ? " dist-opt" : "") +
             (r.resume_as.empty() ? "" : " resume " + r.resume_as);
  return label;
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

std::set<std::string> covered(const std::vector<Run>& runs) {
  std::set<std::string> f;
  for (const Run& r : runs) {
    const auto more = features_of(*r.row, r.layout, std::string(to_string(r.dispatcher)));
    f.insert(more.begin(), more.end());
  }
  return f;
}

void print_table(const std::vector<Run>& runs, const CheckOptions& o, std::ostream& out) {
  out << "moe-oracle check: " << runs.size() << " runs, backend " << o.backend << ", kernels " << o.kernels << ", "
      << o.dtype << "; each cell: max |parallel − oracle| over every rank and element (pass: ≤ " << fmt(o.atol)
      << " + " << fmt(o.rtol) << "·|oracle|); with steps, the maximum over the steps\n";
  const CheckRow* last = nullptr;
  std::unique_ptr<TextTable> table;
  std::vector<std::string> header{"layout", "dispatcher"};
  for (int q = 0; q < dist::kQuantities; ++q) header.emplace_back(to_string(static_cast<dist::Quantity>(q)));
  header.emplace_back("seconds");
  header.emplace_back("result");
  for (const Run& r : runs) {
    if (r.row != last) {
      if (table) table->print(out);
      last = r.row;
      out << "\n" << row_label(*r.row) << ": " << r.row->run.describe() << "\n";
      table = std::make_unique<TextTable>(header);
    }
    std::vector<std::string> row{layout_name(r.layout), std::string(to_string(r.dispatcher))};
    for (const auto& e : r.result.errors) row.push_back(e.compared ? fmt(e.max_abs) : "-");
    row.push_back(trimmed(r.seconds, 2));
    row.emplace_back(r.result.pass() ? "PASS" : "FAIL");
    table->add_row(row);
  }
  if (table) table->print(out);
  int failed = 0;
  for (const Run& r : runs) {
    if (r.result.pass()) continue;
    ++failed;
    out << std::setprecision(17) << "\nFAIL " << row_label(*r.row) << " [" << r.row->run.semantics << "] "
        << layout_name(r.layout) << " " << to_string(r.dispatcher) << ": first mismatch in " << r.result.first.tensor
        << " on rank " << r.result.first.rank << " at flat index " << r.result.first.index << ": parallel "
        << r.result.first.got << ", oracle " << r.result.first.want << "\n";
  }
  const auto features = covered(runs);
  std::string missing;
  for (const auto& name : all_features())
    if (!features.count(name)) missing += (missing.empty() ? "" : ", ") + name;
  out << "\ncoverage: " << features.size() << " of " << all_features().size() << " features";
  out << (missing.empty() ? " (every option of the oracle, parallel axis, loss mode and modelled deviation)"
                          : "; not run: " + missing)
      << "\n";
  out << runs.size() - static_cast<size_t>(failed) << " passed, " << failed << " failed\n";
}

nlohmann::json to_json(const std::vector<Run>& runs) {
  nlohmann::json out;
  nlohmann::json j = nlohmann::json::array();
  for (const Run& r : runs) {
    nlohmann::json e{{"row", row_label(*r.row)},
                     {"model", r.row->run.describe()},
                     {"semantics", Semantics::parse(r.row->run.semantics).spec()},
                     {"layout", layout_json(r.layout)},
                     {"dispatcher", to_string(r.dispatcher)},
                     {"pass", r.result.pass()},
                     {"seconds", r.seconds}};
    for (int q = 0; q < dist::kQuantities; ++q) {
      const auto& err = r.result.errors[static_cast<size_t>(q)];
      const std::string name(to_string(static_cast<dist::Quantity>(q)));
      e["max_abs"][name] = err.compared ? nlohmann::json(err.max_abs) : nlohmann::json(nullptr);
    }
    if (!r.result.pass())
      e["first_mismatch"] = {{"tensor", r.result.first.tensor},
                             {"rank", r.result.first.rank},
                             {"index", r.result.first.index},
                             {"parallel", r.result.first.got},
                             {"oracle", r.result.first.want}};
    j.push_back(e);
  }
  out["runs"] = j;
  const auto features = covered(runs);
  out["features_covered"] = std::vector<std::string>(features.begin(), features.end());
  std::vector<std::string> missing;
  for (const auto& name : all_features())
    if (!features.count(name)) missing.push_back(name);
  out["features_not_run"] = missing;
  return out;
}

// N whole training steps of one (layout, dispatcher), optionally resumed under another layout: the comparisons
// of all steps merged into one.
dist::RankComparison run_steps(const CheckOptions& o, const CheckRow& row, const dist::CheckProblem& base,
                               Communicator* world) {
  dist::RunProblem run;
  run.config = base.config;
  run.params = base.params;
  for (int s = 0; s < row.steps; ++s) run.batches.push_back(row.run.batch(base.config, row.run.seed + 100 + s));
  run.layout = base.layout;
  run.options = base.options;
  run.optimizer.config.kind = o.optimizer == "sgd" ? OptimizerKind::sgd : OptimizerKind::adam;
  run.optimizer.distributed = row.distributed_optimizer;
  run.tolerance = base.tolerance;
  if (!row.resume_as.empty()) {
    run.resume_as = parse_layout(row.resume_as, "--resume-as");
    run.checkpoint_dir = o.checkpoint_dir;
  }
  const auto oracle = dist::oracle_trajectory(run);
  const auto steps = world ? dist::check_run_on_world(*world, run, oracle) : dist::check_run_inproc(run, oracle);
  dist::RankComparison merged;
  for (const auto& s : steps) merged.merge(s);
  return merged;
}

// Runs every (row, layout, dispatcher) on `world` (MPI) or on in-process ranks (world == nullptr).
std::vector<Run> run_all(const CheckOptions& o, const std::vector<CheckRow>& rows, const dist::KernelBackend& kernels,
                         Communicator* world) {
  std::vector<dist::DispatcherKind> kinds;
  if (o.dispatcher == "all")
    kinds = {dist::DispatcherKind::alltoall, dist::DispatcherKind::allgather, dist::DispatcherKind::flex};
  else
    kinds = {dist::parse_dispatcher(o.dispatcher)};

  // Every error before any work: models, layouts, batch splits.
  for (const CheckRow& row : rows) {
    row.run.model();
    for (const ParallelLayout& layout : row.layouts) {
      layout.validate();
      num_microbatches(layout, row.run.global_batch, row.run.micro_batch);
      if (world && layout.world > world->size())
        throw std::invalid_argument("layout " + layout_name(layout) + " needs " + std::to_string(layout.world) +
                                    " ranks; mpirun started " + std::to_string(world->size()));
    }
    if (!row.resume_as.empty()) parse_layout(row.resume_as, "--resume-as");
    row.run.padded(row.run.global_batch);
  }
  std::vector<Run> runs;
  for (const CheckRow& row : rows) {
    const ModelConfig model = row.run.model();
    const ModelParams<double> params = random_model_params<double>(model, row.run.seed);
    const GlobalBatch batch = row.run.batch(model, row.run.seed + 1);
    for (const ParallelLayout& layout : row.layouts) {
      dist::CheckProblem problem{model, params, batch, layout, {}, {o.atol, o.rtol}};
      for (auto kind : kinds) {
        problem.options = {kind, row.run.mode(), row.run.micro_batch};
        problem.options.kernels = &kernels;
        problem.options.precision = o.dtype == "float" ? dist::Precision::float32 : dist::Precision::float64;
        const auto start = std::chrono::steady_clock::now();
        dist::RankComparison result;
        if (row.steps > 0) {
          result = run_steps(o, row, problem, world);
        } else if (world) {
          const GlobalStep oracle = dist::oracle_step(problem);
          // The first layout.world ranks run it; the rest sit it out in their own color.
          auto sub = world->split(world->rank() < layout.world ? 0 : 1, world->rank());
          if (world->rank() < layout.world) result = dist::check_on_world(*sub, problem, oracle);
        } else {
          result = dist::check_inproc(problem, dist::oracle_step(problem));
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        runs.push_back({&row, layout, kind, result, seconds});
        if (!o.json && (!world || world->rank() == 0))
          std::cerr << "  " << row_label(row) << " [" << row.run.semantics << "] " << layout_name(layout) << " "
                    << to_string(kind) << ": " << (result.pass() ? "pass" : "FAIL") << "\n";
      }
    }
  }
  return runs;
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  o->layout.world = 0;
  auto* cmd = app.add_subcommand(
      "check",
      "Run the parallel MoE system and compare every rank with the oracle (default: the embedded set of models "
      "with padding × layouts × 3 dispatchers × semantics profiles, printing the features it covered)");
  add_run_options(*cmd, o->run);
  cmd->add_option("--world", o->layout.world, "run this one layout instead of the built-in ones");
  cmd->add_option("--tp", o->layout.tp, "tensor (and sequence) parallel size")->capture_default_str();
  cmd->add_option("--cp", o->layout.cp, "context parallel size")->capture_default_str();
  cmd->add_option("--ep", o->layout.ep, "expert parallel size")->capture_default_str();
  cmd->add_option("--etp", o->layout.etp, "expert tensor parallel size")->capture_default_str();
  cmd->add_option("--pp", o->layout.pp, "pipeline parallel size")->capture_default_str();
  cmd->add_option("--order", o->layout.order, "rank order, fastest-varying axis first")->capture_default_str();
  cmd->add_option("--steps", o->steps,
                  "run N whole training steps (optimizer, bias update) against the oracle's "
                  "trajectory")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--resume-as", o->resume_as,
                  "with --steps: save after N/2 steps and resume under this layout, "
                  "e.g. world=4,ep=2,etp=2");
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "where resumed runs write their checkpoint (default: a fresh temporary folder, removed after)");
  cmd->add_option("--optimizer", o->optimizer, "adam or sgd (with --steps)")->capture_default_str();
  cmd->add_flag("--distributed-optimizer", o->distributed_optimizer,
                "shard optimizer state; reduce-scatter gradients, all-gather parameters");
  cmd->add_option("--dispatcher", o->dispatcher, "alltoall, allgather, flex or all")->capture_default_str();
  cmd->add_option("--backend", o->backend, "inproc (threads) or mpi (under mpirun)")->capture_default_str();
  cmd->add_option("--kernels", o->kernels,
                  std::string("what does the data work (row moves, grouped SwiGLU): ") + kKernelNames)
      ->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "double or float: the precision the parallel system runs in")
      ->capture_default_str();
  cmd->add_option("--atol", o->atol, "absolute tolerance (default: 1e-13 double, 5e-8 float)");
  cmd->add_option("--rtol", o->rtol, "relative tolerance (default: 1e-9 double, 1e-4 float)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o, cmd] {
    for (const char* flag : {"--preset", "--layers", "--hash-layers", "--seq", "--micro-batch", "--global-batch",
                             "--padding", "--scaling", "--seed"})
      o->custom_model = o->custom_model || cmd->count(flag) > 0;
    o->custom_semantics = cmd->count("--semantics") > 0;
    if (o->backend != "inproc" && o->backend != "mpi")
      throw std::invalid_argument("unknown backend '" + o->backend + "' (inproc, mpi)");
    if (o->optimizer != "adam" && o->optimizer != "sgd")
      throw std::invalid_argument("unknown optimizer '" + o->optimizer + "' (adam, sgd)");
    if (!o->resume_as.empty() && o->steps < 2) throw std::invalid_argument("--resume-as needs --steps 2 or more");
    if (o->dtype != "double" && o->dtype != "float")
      throw std::invalid_argument("unknown dtype '" + o->dtype + "' (double, float)");
    const bool single = o->dtype == "float";
    if (o->atol < 0) o->atol = single ? 5e-8 : 1e-13;
    if (o->rtol < 0) o->rtol = single ? 1e-4 : 1e-9;
    std::vector<CheckRow> rows = rows_of(*o);
    if (single) {
      // The optimizer state is double: multi-step rows run in double only.
      if (o->steps > 0) throw std::invalid_argument("--steps runs in double (the optimizer state is double); drop --dtype float");
      std::erase_if(rows, [](const CheckRow& r) { return r.steps > 0; });
    }
    bool print = true;
    std::unique_ptr<MpiRuntime> mpi;
    std::unique_ptr<MpiCommunicator> world;
    if (o->backend == "mpi") {
      int argc = 0;
      char** argv = nullptr;
      mpi = std::make_unique<MpiRuntime>(argc, argv);
      world = std::make_unique<MpiCommunicator>(*mpi);
      print = world->rank() == 0;
    }
    // A checkpoint folder of this run's own (two checks running at once must not share one): named after the
    // process id of rank 0, which every MPI rank learns, under the temporary directory, removed at the end.
    const bool own_checkpoint_dir = o->checkpoint_dir.empty();
    if (own_checkpoint_dir) {
      std::int64_t pid = static_cast<std::int64_t>(::getpid());
      if (world) world->broadcast<std::int64_t>(std::span<std::int64_t>(&pid, 1), 0);
      o->checkpoint_dir = (std::filesystem::temp_directory_path() / ("moe-oracle-checkpoint-" + std::to_string(pid))).string();
    }
    const auto remove_own = [&] {
      if (own_checkpoint_dir && (!world || world->rank() == 0)) std::filesystem::remove_all(o->checkpoint_dir);
    };
    const KernelChoice kernels(o->kernels);
    std::vector<Run> runs;
    try {
      runs = run_all(*o, rows, kernels.backend(), world.get());
    } catch (...) {
      remove_own();
      throw;
    }
    remove_own();
    bool pass = true;
    for (const Run& r : runs) pass = pass && r.result.pass();
    if (print) {
      if (o->json)
        std::cout << to_json(runs).dump(2) << "\n";
      else
        print_table(runs, *o, std::cout);
    }
    world.reset();
    mpi.reset();
    if (!pass) throw CLI::RuntimeError(1);
  });
}

}  // namespace moe::cli
