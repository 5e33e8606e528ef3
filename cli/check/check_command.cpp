// `moe-oracle check` — the main job: run the parallel MoE system (forward, backward, gradient sync, expert-bias
// update) for each layout × dispatcher and compare every rank's objective, gradient shards and biases with the
// global step oracle. Exit status 1 on any mismatch, naming the first differing tensor, rank and index.
//
// With no model or layout flags it runs the embedded default (check_suite.hpp): test-size models that between
// them use every option of the oracle, with uneven padding, over layouts (world ≤ 8) that exercise EP, ETP, TP+SP,
// CP, PP, EDP > 1 and every dispatcher, under the intended semantics and the Megatron profiles, with a resumed
// multi-step run; it prints the features it covered. --semantics P runs that set under P. Model or layout flags
// run one configuration instead. Under `mpirun -np N … --backend mpi` the ranks are processes; a layout smaller
// than N runs on the first ranks while the others wait. `--backend nccl` is the same job with a GPU per process and
// the collectives in NCCL on device buffers (cuda/nccl_world.hpp); there a layout wider than the job runs on
// in-process ranks of rank 0 (host collectives), so that the whole default set runs on one GPU too, and the report
// says how many runs did.
// --steps N runs N whole training steps (optimizer and bias update included) against the oracle's trajectory;
// --resume-as saves after N/2 steps and continues under another layout from the checkpoint.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>

#include "cli/check/check_compare_roundtrip.hpp"
#include "cli/check/check_device_layer.hpp"
#include "cli/check/check_job.hpp"
#include "cli/check/check_report.hpp"
#include "cli/check/check_rows.hpp"
#include "cli/choice_option.hpp"
#include "cli/commands.hpp"
#include "cli/given_options.hpp"
#include "cli/kernel_choice.hpp"
#include "cli/side_by_side.hpp"
#include "cli/text_format.hpp"
#include "distributed/check/differential_check.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/rank_groups.hpp"
#include "formats/config_json.hpp"
#include "reference/memory_estimate.hpp"

namespace moe::cli {
namespace {


// What a check of `row` on `layout` (resumed under `resume`, if any) holds at once in this process: the oracle's
// parameters and gradients, each of its ranks' shards (at worst a full copy each) and, with steps, Adam's moments;
// the activations of a step's microbatches; and when the ranks are in process (`in_process`), the ranks themselves,
// their stacks and groups (dist::inproc_world_bytes: 0.17 GiB at 1024 ranks). Under mpirun a
// process holds one rank.
MemoryEstimate check_memory(const ModelConfig& m, const RunOptions& run, const ParallelLayout& layout, int steps,
                            const std::optional<ParallelLayout>& resume, bool in_process) {
  const int world = resume ? std::max(layout.world, resume->world) : layout.world;
  // The model's parameters by the library's count (reference/memory_estimate.hpp), times the copies a check holds.
  const double copies = 3 + (in_process ? world : 1) + (steps > 0 ? 3 : 0);
  const double tokens = static_cast<double>(run.global_batch) * run.seq;
  const double h = m.layer.hidden, E = m.layer.num_experts, d = m.layer.ffn_hidden, k = m.layer.topk, V = m.vocab;
  MemoryEstimate e;
  e.parameters = static_cast<double>(model_param_bytes(m)) * copies;
  e.activations = 8 * 2 * tokens * (m.num_layers * (10 * h + 4 * E + 6 * k * d) + 2 * V);
  if (in_process) {  // the two phases of a resumed run build their groups one after the other
    e.ranks = static_cast<double>(dist::inproc_world_bytes(ProcessGroups(layout)));
    if (resume) e.ranks = std::max(e.ranks, static_cast<double>(dist::inproc_world_bytes(ProcessGroups(*resume))));
  }
  return e;
}

// The runs that go side by side (--jobs) each hold their own world: the `jobs` largest estimates together.
MemoryEstimate side_by_side(std::vector<MemoryEstimate> runs, int jobs) {
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.total() > b.total(); });
  MemoryEstimate sum;
  for (std::size_t i = 0; i < runs.size() && i < static_cast<std::size_t>(std::max(jobs, 1)); ++i) {
    sum.parameters += runs[i].parameters;
    sum.activations += runs[i].activations;
    sum.ranks += runs[i].ranks;
  }
  return sum;
}

bool selected(const CheckOptions& o, const std::string& name) {
  if (o.filters.empty()) return true;
  for (const auto& f : o.filters)
    if (name.find(f) != std::string::npos) return true;
  return false;
}

// The precision the parallel system computes in for --dtype: bf16 is float arithmetic with bf16 storage.
Precision arithmetic_of(Precision dtype) { return dtype == Precision::float64 ? dtype : Precision::float32; }

// N whole training steps of one layout, optionally resumed under another layout; the dispatcher is set per run.
dist::RunProblem run_problem(const CheckOptions& o, const CheckRow& row, const dist::CheckProblem& base) {
  dist::RunProblem run;
  run.config = base.config;
  run.params = base.params;
  for (int s = 0; s < row.steps; ++s) run.batches.push_back(row.run.batch(base.config, row.run.seed + 100 + s));
  run.layout = base.layout;
  run.options = base.options;
  run.optimizer.config.kind = row.optimizer;
  run.optimizer.distributed = row.distributed_optimizer;
  run.optimizer.config.clip_grad = row.clip_grad;
  run.options.hot_expert_slots = row.hot_expert_slots;
  run.tolerance = base.tolerance;
  if (row.optimizer == OptimizerKind::muon && !o.tolerance_given) run.tolerance = tolerance(Compared::muon_step, Precision::float64);
  if (!row.resume_as.empty()) {
    run.resume_as = parse_layout(row.resume_as, "--resume-as");
    run.checkpoint_dir = o.checkpoint_dir;
  }
  return run;
}

// The replica slots a run's trainers planned (StepOptions::hot_expert_slots): each step from the previous step's
// counts, which match the oracle's when the run does; none on a trainer's first step (the first step, and the
// first after a resume).
int planned_slots(const CheckRow& row, const dist::RunProblem& run, const std::vector<TrajectoryPoint>& oracle) {
  if (row.hot_expert_slots == 0) return 0;
  const int resumed = run.resume_as ? row.steps / 2 : -1;
  int slots = 0;
  for (int s = 1; s < int(oracle.size()); ++s) {
    if (s == resumed) continue;
    const int ep = run.resume_as && s > resumed ? run.resume_as->ep : run.layout.ep;
    for (const auto& counts : oracle[std::size_t(s - 1)].bias_counts)
      slots += dist::plan_replicas(counts, ep, row.hot_expert_slots).slots();
  }
  return slots;
}

// Where check's own checkpoint goes: $TMPDIR when set, else /dev/shm when there is one, else the system's temporary
// folder. The checkpoint lives only for the check; in memory its fsyncs cost nothing, on a disk they were half
// the time of the default set's resumed runs (0.55 s of 1.1 s each, measured).
std::filesystem::path scratch_directory() {
  const char* tmpdir = std::getenv("TMPDIR");
  std::error_code error;
  if ((tmpdir == nullptr || *tmpdir == '\0') && std::filesystem::is_directory("/dev/shm", error) &&
      ::access("/dev/shm", W_OK | X_OK) == 0)
    return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

// The oracle of one (row, layout), computed on first use and shared by its dispatchers: what the single device
// computes does not depend on how the parallel system moves tokens.
struct LayoutOracle {
  std::optional<GlobalStep> step;
  std::optional<std::vector<TrajectoryPoint>> trajectory;
};

// The dispatchers a row runs: wave-scheduled rows the AlltoAll one only (waves_fit).
std::vector<dist::DispatcherKind> kinds_of(const CheckRow& row, const std::vector<dist::DispatcherKind>& kinds) {
  if (row.expert_waves <= 1) return kinds;
  return {dist::DispatcherKind::alltoall};
}

// Runs every (row, layout, dispatcher) on `world` (MPI) or on in-process ranks (world == nullptr) into `runs`. When
// a run throws, `runs` still holds every run that finished before the exception propagates, so that the caller
// can report them: a failure found before a hard error is not lost to it.
void run_all(const CheckOptions& o, const std::vector<CheckRow>& rows, const dist::KernelBackend& kernels,
             Communicator* world, std::vector<CheckRun>& runs) {
  const std::vector<dist::DispatcherKind> kinds =
      o.dispatcher ? std::vector{*o.dispatcher} : all_values<dist::DispatcherKind>();

  // Every error before any work: models, layouts, batch splits, runs that would not fit in memory.
  int chosen = 0;
  std::vector<MemoryEstimate> memory;  // of each (row, layout) that runs
  for (const CheckRow& row : rows) {
    const ModelConfig model = row.run.model();
    std::optional<ParallelLayout> resume;
    if (!row.resume_as.empty()) resume = parse_layout(row.resume_as, "--resume-as");
    for (const ParallelLayout& layout : row.layouts) {
      layout.validate();
      num_microbatches(layout, row.run.global_batch, row.run.micro_batch);
      if (model.mtp_depth > 0 && layout.pp > 1)
        throw std::invalid_argument("layout " + layout_name(layout) + ": multi-token prediction runs with pp = 1 "
                                    "here (its depths need the embedding, which lives on the first stage)");
      if (world && layout.world > world->size() && o.backend != Backend::nccl)
        throw std::invalid_argument("layout " + layout_name(layout) + " needs " + std::to_string(layout.world) +
                                    " ranks; mpirun started " + std::to_string(world->size()));
      // In process: no mpirun, or (nccl) a layout wider than the job, run by rank 0 (run_all's tasks below).
      const bool in_process = world == nullptr || layout.world > world->size();
      const MemoryEstimate e = check_memory(model, row.run, layout, row.steps, resume, in_process);
      require_fits(e, "checking " + row.run.source.source() + " on " + layout_name(layout),
                   "check its structure at test size with --shrink, or give a smaller --seq / --global-batch" +
                       std::string(in_process ? "; or fewer ranks (--world), or --backend mpi (a process per rank)"
                                              : ""));
      int selected_here = 0;
      for (auto kind : kinds_of(row, kinds)) selected_here += selected(o, run_name(row, layout, kind));
      chosen += selected_here;
      if (selected_here > 0) memory.push_back(e);
    }
    row.run.padded(row.run.global_batch);
  }
  if (chosen == 0)
    throw std::invalid_argument("--filter matches no run (names look like \"" +
                                run_name(rows.front(), rows.front().layouts.front(), kinds.front()) + "\")");
  const int jobs = world ? 1 : std::min<int>(o.jobs, static_cast<int>(memory.size()));
  if (jobs > 1)
    require_fits(side_by_side(memory, jobs),
                 "checking " + std::to_string(jobs) + " worlds side by side (--jobs " + std::to_string(o.jobs) + ")",
                 "give a smaller --jobs (1 runs them one after another), fewer ranks, or --backend mpi");
  // One task per (row, layout): the oracle of a layout is computed once and shared by its dispatchers.
  struct Task {
    const CheckRow* row;
    const ParallelLayout* layout;
    std::size_t row_index;
    std::string checkpoint_dir;
  };
  std::vector<Task> tasks;
  // Per row: the main parameters (under bf16 storage each step computes with their bf16 copy: global_step,
  // train_step) and the batch, drawn side by side: before any run starts, a serial loop would keep a core idle.
  std::vector<ModelParams<double>> params(rows.size());
  std::vector<GlobalBatch> batches(rows.size());
  run_side_by_side(int(rows.size()), world ? 1 : o.jobs, [&](int r) {
    const CheckRow& row = rows[std::size_t(r)];
    const ModelConfig model = row.run.model();
    params[std::size_t(r)] = random_model_params<double>(model, row.run.seed);
    batches[std::size_t(r)] = row.run.batch(model, row.run.seed + 1);
  });
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const CheckRow& row = rows[r];
    const auto row_kinds = kinds_of(row, kinds);
    for (const ParallelLayout& layout : row.layouts)
      if (std::any_of(row_kinds.begin(), row_kinds.end(), [&](auto k) { return selected(o, run_name(row, layout, k)); }))
        tasks.push_back({&row, &layout, r, o.checkpoint_dir});
  }
  // Runs side by side must not share a checkpoint: with more than one resumed task each saves in a subfolder.
  if (std::count_if(tasks.begin(), tasks.end(), [](const Task& t) { return !t.row->resume_as.empty(); }) > 1)
    for (std::size_t t = 0; t < tasks.size(); ++t)
      tasks[t].checkpoint_dir = (std::filesystem::path(o.checkpoint_dir) / ("run-" + std::to_string(t + 1))).string();

  std::vector<std::vector<CheckRun>> done(tasks.size());
  // In task order (the order a serial loop finishes them); run_side_by_side has joined every worker when it
  // returns or throws, so `done` is whole here either way.
  const auto collect = [&] {
    for (auto& task_runs : done) runs.insert(runs.end(), task_runs.begin(), task_runs.end());
  };
  std::mutex progress;
  int finished = 0;
  try {
    run_side_by_side(int(tasks.size()), world ? 1 : o.jobs, [&](int t) {
      const CheckRow& row = *tasks[std::size_t(t)].row;
      const ParallelLayout& layout = *tasks[std::size_t(t)].layout;
      const std::size_t r = tasks[std::size_t(t)].row_index;
      // The job's ranks, or (nccl, a layout wider than the job) in-process ranks of rank 0 while the others go on.
      Communicator* ranks = world && layout.world <= world->size() ? world : nullptr;
      const bool in_process = world && ranks == nullptr;
      if (in_process && world->rank() != 0) return;
      dist::CheckProblem problem{row.run.model(), params[r], batches[r], layout, {}, {o.atol, o.rtol}};
      LayoutOracle oracle;
      for (auto kind : kinds_of(row, kinds)) {
        if (!selected(o, run_name(row, layout, kind))) continue;
        problem.options = {kind, row.run.mode(), row.run.micro_batch};
        problem.options.kernels = &kernels;
        // A bf16 row runs in float or in double (bf16_in_double), with its own tolerance unless one was given.
        const bool in_double = bf16_in_double(row);
        problem.options.precision = row.run.bf16_storage ? in_double ? Precision::float64 : Precision::float32
                                                         : arithmetic_of(o.dtype);
        if (row.run.bf16_storage && !o.tolerance_given) problem.tolerance = bf16_row_tolerance(row);
        problem.options.kv_exchange = row.cp_comm_type;
        problem.options.expert_waves = row.expert_waves;
        const auto start = std::chrono::steady_clock::now();
        dist::RankComparison result;
        std::vector<dist::RankComparison> steps;
        Tolerance applied = problem.tolerance;
        int replica_slots = 0;
        if (row.steps > 0) {
          dist::RunProblem run = run_problem(o, row, problem);
          applied = run.tolerance;
          if (!row.resume_as.empty()) run.checkpoint_dir = tasks[std::size_t(t)].checkpoint_dir;
          if (!oracle.trajectory) oracle.trajectory = dist::oracle_trajectory(run);
          steps = ranks ? dist::check_run_on_world(*ranks, run, *oracle.trajectory)
                        : dist::check_run_inproc(run, *oracle.trajectory);
          for (const auto& s : steps) result.merge(s);
          replica_slots = planned_slots(row, run, *oracle.trajectory);
        } else {
          if (!oracle.step) oracle.step = dist::oracle_step(problem);
          // Replicated hot experts, planned from the batch's expert counts as a run plans from its previous step's.
          problem.options.replication.clear();
          if (row.hot_expert_slots > 0)
            for (const auto& counts : oracle.step->bias_counts) {
              problem.options.replication.push_back(dist::plan_replicas(counts, layout.ep, row.hot_expert_slots));
              replica_slots += problem.options.replication.back().slots();
            }
          if (ranks) {
            // The first layout.world ranks run it; the rest sit it out in their own color.
            auto sub = ranks->split(ranks->rank() < layout.world ? 0 : 1, ranks->rank());
            if (ranks->rank() < layout.world) result = dist::check_on_world(*sub, problem, *oracle.step);
          } else {
            result = dist::check_inproc(problem, *oracle.step);
          }
        }
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        done[std::size_t(t)].push_back(
            {&row, layout, kind, result, seconds, steps, applied, replica_slots, in_process, problem.config,
             problem.options.precision, problem.options.mode});
        if (!o.json && (!world || world->rank() == 0)) {
          std::lock_guard lock(progress);
          std::cerr << "  [" << ++finished << "/" << chosen << "] " << run_name(row, layout, kind) << ": "
                    << (result.pass() ? "pass" : "FAIL") << "\n";
        }
      }
      // In process, a resumed task's run-N folder of the check's own scratch folder goes as the task ends, beside
      // the other worker's runs rather than in the serial tail (the scratch folder itself is removed at the end).
      const std::string& own = tasks[std::size_t(t)].checkpoint_dir;
      if (!world && o.own_checkpoint_dir && !row.resume_as.empty() && own != o.checkpoint_dir) {
        std::error_code ignored;  // what is left is removed with the scratch folder
        std::filesystem::remove_all(own, ignored);
      }
    });
  } catch (...) {
    collect();
    throw;
  }
  collect();
}

// What check prints when a hard error stops it partway (exit 2): the table of the runs that finished, with their
// failures, then a line saying the check is incomplete; the error itself follows on stderr as one line (main()).
// Before, stdout was empty and a failure found before the error showed only in stderr's progress lines. The
// coverage line is left out: a partial set covers less by construction.
void print_unfinished(const std::vector<CheckRun>& runs, ReportSettings settings, bool json, const std::string& error) {
  settings.default_set = false;
  if (json) {
    nlohmann::json report = report_json(runs, settings);
    report["complete"] = false;
    report["error"] = error;
    std::cout << report.dump(2) << "\n";
    return;
  }
  print_report(runs, settings, std::cout);
  std::cout << "incomplete: the check stopped with an error after these " << runs.size()
            << " runs (the error is on standard error); the others did not run or did not finish\n";
}

// The report of a finished check on stdout (text or --json), and --junit's file.
void report(const CheckOptions& o, const std::vector<CheckRun>& runs, const ReportSettings& settings,
            const KernelChoice& kernels, const std::vector<DeviceLayerRun>& device_layers,
            const std::vector<RoundTrip>& round_trips) {
  if (o.json) {
    nlohmann::json report = report_json(runs, settings);
    if (const std::string device = kernels.device_summary(); !device.empty()) report["device"] = device;
    if (!device_layers.empty()) report["device_layer"] = device_layers_json(device_layers);
    for (const RoundTrip& t : round_trips)
      report["compare_round_trips"].push_back({{"preset", t.preset}, {"layout", layout_name(t.layout)},
                                               {"tensors", t.tensors}, {"pass", t.pass},
                                               {"first_failure", t.first_failure}});
    std::cout << report.dump(2) << "\n";
  } else {
    print_report(runs, settings, std::cout);
    if (const std::string device = kernels.device_summary(); !device.empty()) std::cout << device << "\n";
    print_device_layers(device_layers, std::cout);
    print_round_trips(round_trips, std::cout);
  }
  if (!o.junit.empty()) write_junit(runs, o.junit);
}

}  // namespace

void add_check_command(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  o->layout.world = 0;
  auto* cmd = app.add_subcommand(
      "check",
      "Run the parallel MoE system and compare every rank with the oracle (default: the embedded set of models "
      "with padding × layouts × every dispatcher × semantics profiles, printing the features it covered)");
  add_run_options(*cmd, o->run);
  add_layout_flags(*cmd, o->layout, false);  // with --world: run this one layout instead of the built-in ones
  cmd->add_option("--vpp,--virtual-pipeline-model-parallel-size", o->layout.vpp,
                  "with --pp: model chunks per pipeline rank, run by the interleaved 1F1B schedule (layers assigned "
                  "round-robin in chunks, as Megatron does)")
      ->check(CLI::Range(1, 1024));
  add_row_flags(*cmd, *o);
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "where resumed runs write their checkpoint (default: a fresh folder under $TMPDIR, or under /dev/shm "
                  "when TMPDIR is unset, removed after); with several resumed runs, each in a subfolder run-N");
  add_choice(*cmd, "--dispatcher,--moe-token-dispatcher-type", o->dispatcher, "the token dispatchers to run", "all");
  add_choice(*cmd, "--backend", o->backend,
             "where the ranks run: threads of this process, mpirun's processes, or those processes with a GPU each "
             "and the collectives in NCCL (layouts wider than the job: in-process ranks of rank 0)");
  add_choice(*cmd, "--kernels", o->kernels, "what does the data work (row moves, grouped SwiGLU)");
  add_choice(*cmd, "--dtype", o->dtype,
             "the precision the parallel system runs in (bf16: float arithmetic with bf16 weights, activations and "
             "activation gradients, against the oracle with the same bf16 storage; docs/numerics.md)",
             std::span<const Named<Precision>>(kDtypeNames));
  const CLI::Validator tolerance(
      [](std::string& value) -> std::string {
        return value.find_first_of('-') == 0 ? "a tolerance is >= 0, got " + value : std::string{};
      },
      "");  // finiteness: every real-valued option is checked for it (moe_oracle.cpp)
  const Tolerance step64 = moe::tolerance(Compared::training_step, Precision::float64);
  const Tolerance step32 = moe::tolerance(Compared::training_step, Precision::float32);
  cmd->add_option("--atol", o->atol, "absolute tolerance (default: " + one_digit(step64.atol) + " double, " +
                                         one_digit(step32.atol) + " float)")
      ->check(tolerance);
  cmd->add_option("--rtol", o->rtol, "relative tolerance (default: " + one_digit(step64.rtol) + " double, " +
                                         one_digit(step32.rtol) + " float)")
      ->check(tolerance);
  cmd->add_flag("--json", o->json, "machine-readable output (with the version, each run's model and semantics)");
  cmd->add_option("--junit", o->junit, "also write JUnit XML here: one testcase per run");
  cmd->add_option("--jobs,-j", o->jobs,
                  "in-process runs to execute side by side, each a world of ranks on one thread (default: the number "
                  "of hardware threads; 1 runs them one after another)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--filter", o->filters,
                  "run only the runs whose name holds this text (e.g. cp2, flex, megatron); repeatable: any of them");
  cmd->callback([o, cmd] {
    finish_options(*cmd, *o);
    const std::vector<CheckRow> rows = rows_of(*o);
    CheckJob job(o->backend);  // MPI and NCCL: close() tears them down in order (check_job.hpp)
    MpiCommunicator* world = job.world();
    const bool print = job.prints();
    // A checkpoint folder of this run's own (two checks running at once must not share one): named after the
    // process id of rank 0, which every MPI rank learns, under scratch_directory(), removed at the end.
    const bool own_checkpoint_dir = o->checkpoint_dir.empty();
    o->own_checkpoint_dir = own_checkpoint_dir;
    if (own_checkpoint_dir) {
      std::int64_t pid = static_cast<std::int64_t>(::getpid());
      if (world) world->broadcast<std::int64_t>(std::span<std::int64_t>(&pid, 1), 0);
      o->checkpoint_dir = (scratch_directory() / ("moe-oracle-checkpoint-" + std::to_string(pid))).string();
    }
    const auto remove_own = [&] {
      if (own_checkpoint_dir && (!world || world->rank() == 0)) std::filesystem::remove_all(o->checkpoint_dir);
    };
    if (world && o->layout.world > 0 && o->layout.world < world->size() && world->rank() == 0)
      std::cerr << "moe-oracle: note: the layout has " << o->layout.world << " ranks; ranks " << o->layout.world
                << "-" << world->size() - 1 << " of the " << world->size() << " mpirun started sit it out\n";
    bool pass = true;
    const ReportSettings settings{job.label(),
                                  std::string(name_of(o->kernels)),
                                  std::string(name_of(o->dtype, std::span<const Named<Precision>>(kDtypeNames))),
                                  o->atol, o->rtol, o->tolerance_given, o->notes,
                                  !o->custom_model && o->layout.world == 0 && o->filters.empty()};
    std::vector<CheckRun> runs;  // what finished, also when an error stops the check partway
    bool reported = false;       // the report was (being) printed: an error after that does not print it again
    try {
      job.join(given_options(*cmd));  // before any work: ranks must run one problem
      const KernelChoice kernels(o->kernels, job.device());
      run_all(*o, rows, kernels.backend(), job.ranks(), runs);
      remove_own();
      for (const CheckRun& r : runs) pass = pass && r.result.pass();
      // On the GPU, also the device layer against the oracle (rank 0: the others would repeat it).
      std::vector<DeviceLayerRun> device_layers;
      if (on_device(o->kernels) && print) device_layers = run_device_layers(runs, o->dtype, o->kernels);
      for (const DeviceLayerRun& r : device_layers) pass = pass && r.pass;
      // The default set also judges compare itself (check_compare_roundtrip.hpp), in process, in double.
      std::vector<RoundTrip> round_trips;
      if (settings.default_set && !world && o->dtype == Precision::float64 && !on_device(o->kernels) &&
          o->row.steps == 0)
        round_trips = compare_round_trips(scratch_directory() / ("moe-oracle-compare-" + std::to_string(::getpid())));
      for (const RoundTrip& t : round_trips) pass = pass && t.pass;
      reported = true;
      if (print) report(*o, runs, settings, kernels, device_layers, round_trips);
    } catch (const std::exception& e) {
      remove_own();
      if (print && !reported && !runs.empty()) print_unfinished(runs, settings, o->json, e.what());
      if (!world) throw;
      job.end_on_error(e.what());
      job.close();
      throw CLI::RuntimeError(2);
    }
    job.close();
    if (!pass) throw CLI::RuntimeError(1);
  });
}

}  // namespace moe::cli
