// `moe-oracle check` — the main job: run the parallel MoE system (forward, backward, gradient sync, expert-bias
// update) for each layout × dispatcher and compare every rank's objective, gradient shards and biases with the
// global step oracle. Exit status 1 on any mismatch, naming the first differing tensor, rank and index.
//
// With no layout flags it runs the embedded default: the tiny-v4 model over a built-in set of layouts (world ≤ 8)
// that exercise EP, ETP, TP+SP, CP, PP, EDP > 1 and every dispatcher. Under `mpirun -np N … --backend mpi` the
// ranks are processes; a layout smaller than N runs on the first ranks while the others wait.
// --steps N runs N whole training steps (optimizer and bias update included) against the oracle's trajectory;
// --resume-as saves after N/2 steps and continues under another layout from the checkpoint.
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>

#include "distributed/differential_check.hpp"
#include "distributed/mpi_communicator.hpp"
#include "distributed/mpi_runtime.hpp"
#include "reference/presets.hpp"
#include "tools/commands.hpp"
#include "tools/kernel_choice.hpp"
#include "tools/layout_options.hpp"

namespace moe::cli {
namespace {

struct CheckOptions {
  std::string preset = "tiny-v4";
  ParallelLayout layout;  // world 0 = the built-in set
  std::string dispatcher = "all";
  std::string scaling = "sum";
  std::string backend = "inproc";
  std::string kernels = "cpu";
  int seq = 16, micro_batch = 1, global_batch = 8, layers = 4, hash_layers = 1;
  int steps = 0;          // 0: one step, gradients compared before any optimizer
  std::string resume_as;  // "world=4,ep=2,etp=2" (steps ≥ 2)
  std::string optimizer = "adam";
  bool distributed_optimizer = false;
  std::string checkpoint_dir = "moe-oracle-checkpoint";
  std::uint64_t seed = 1;
  std::string dtype = "double";
  double atol = -1, rtol = -1;  // < 0: the dtype's default (DESIGN §3)
  bool json = false;
};

// The embedded default: each line adds something the ones above it don't have.
std::vector<ParallelLayout> default_layouts() {
  return {
      ParallelLayout{.world = 1},                              // the oracle's own split: one rank
      ParallelLayout{.world = 4, .ep = 4},                     // EP4
      ParallelLayout{.world = 4, .ep = 2},                     // EP2 with EDP 2
      ParallelLayout{.world = 4, .ep = 2, .etp = 2},           // EP2 × ETP2
      ParallelLayout{.world = 4, .cp = 2, .ep = 2},            // CP2
      ParallelLayout{.world = 8, .tp = 2, .ep = 4},            // TP2 + SP, TP ≠ ETP, EDP 2
      ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2},  // TP2 = ETP2, EP2, EDP 2
      ParallelLayout{.world = 8, .tp = 2, .cp = 2, .ep = 8},   // TP2 · CP2 · EP8: 2 experts/rank, token-poor ranks
      ParallelLayout{.world = 8, .pp = 2, .ep = 4},   // PP2 · EP4: activations and gradients between stages
      ParallelLayout{.world = 8, .pp = 4, .ep = 2}};  // PP4 · EP2 · EDP 1
}

// "world=4,tp=1,cp=1,ep=2,etp=2,pp=1" (unnamed sizes are 1).
ParallelLayout parse_layout(const std::string& text) {
  ParallelLayout l;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos) throw std::invalid_argument("--resume-as: '" + item + "' is not name=size");
    const std::string key = item.substr(0, eq);
    const int value = std::stoi(item.substr(eq + 1));
    if (key == "world")
      l.world = value;
    else if (key == "tp")
      l.tp = value;
    else if (key == "cp")
      l.cp = value;
    else if (key == "ep")
      l.ep = value;
    else if (key == "etp")
      l.etp = value;
    else if (key == "pp")
      l.pp = value;
    else
      throw std::invalid_argument("--resume-as: unknown size '" + key + "' (world, tp, cp, ep, etp, pp)");
  }
  l.validate();
  return l;
}

ModelConfig model_of(const CheckOptions& o) {
  const LayerPreset& p = layer_preset(o.preset);
  ModelConfig m;
  m.layer = p.config;
  m.num_layers = o.layers;
  m.n_hash_layers = o.hash_layers;
  m.vocab = p.vocab;
  m.validate();
  return m;
}

std::string layout_name(const ParallelLayout& l) {
  std::ostringstream s;
  s << "w" << l.world << " tp" << l.tp << " cp" << l.cp << " pp" << l.pp << " ep" << l.ep << " etp" << l.etp << " dp"
    << l.dp() << " edp" << l.edp();
  return s.str();
}

struct Run {
  ParallelLayout layout;
  dist::DispatcherKind dispatcher;
  dist::RankComparison result;
  double seconds = 0;
};

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

void print_table(const std::vector<Run>& runs, const CheckOptions& o, std::ostream& out) {
  out << "moe-oracle check: " << o.preset << " model (" << o.layers << " layers, " << o.hash_layers
      << " hash), global batch " << o.global_batch << " × seq " << o.seq << ", micro-batch " << o.micro_batch
      << ", scaling " << o.scaling << ", backend " << o.backend << ", kernels " << o.kernels << ", " << o.dtype
      << "\n";
  if (o.steps > 0)
    out << o.steps << " training steps with " << o.optimizer
        << (o.distributed_optimizer ? " (distributed optimizer)" : " (DDP)")
        << (o.resume_as.empty() ? ""
                                : ", saved after step " + std::to_string(o.steps / 2) + ", resumed as " + o.resume_as)
        << "; errors are the maximum over the steps\n";
  out << "each cell: max |parallel − oracle| over every rank and element (pass: ≤ " << fmt(o.atol) << " + "
      << fmt(o.rtol) << "·|oracle|)\n\n";
  std::vector<std::string> header{"layout", "dispatcher"};
  for (int q = 0; q < dist::kQuantities; ++q) header.emplace_back(to_string(static_cast<dist::Quantity>(q)));
  header.emplace_back("seconds");
  header.emplace_back("result");
  TextTable table(header);
  for (const Run& r : runs) {
    std::vector<std::string> row{layout_name(r.layout), std::string(to_string(r.dispatcher))};
    for (const auto& e : r.result.errors) row.push_back(e.compared ? fmt(e.max_abs) : "-");
    row.push_back(trimmed(r.seconds, 2));
    row.emplace_back(r.result.pass() ? "PASS" : "FAIL");
    table.add_row(row);
  }
  table.print(out);
  int failed = 0;
  for (const Run& r : runs) {
    if (r.result.pass()) continue;
    ++failed;
    out << std::setprecision(17) << "\nFAIL " << layout_name(r.layout) << " " << to_string(r.dispatcher)
        << ": first mismatch in " << r.result.first.tensor << " on rank " << r.result.first.rank << " at flat index "
        << r.result.first.index << ": parallel " << r.result.first.got << ", oracle " << r.result.first.want << "\n";
  }
  out << "\n" << runs.size() - static_cast<size_t>(failed) << " passed, " << failed << " failed\n";
}

nlohmann::json to_json(const std::vector<Run>& runs) {
  nlohmann::json j = nlohmann::json::array();
  for (const Run& r : runs) {
    nlohmann::json e{{"layout", layout_json(r.layout)},
                     {"dispatcher", to_string(r.dispatcher)},
                     {"pass", r.result.pass()},
                     {"seconds", r.seconds}};
    for (int q = 0; q < dist::kQuantities; ++q) {
      const auto& err = r.result.errors[static_cast<size_t>(q)];
      e["max_abs"][std::string(to_string(static_cast<dist::Quantity>(q)))] = err.max_abs;
    }
    if (!r.result.pass())
      e["first_mismatch"] = {{"tensor", r.result.first.tensor},
                             {"rank", r.result.first.rank},
                             {"index", r.result.first.index},
                             {"parallel", r.result.first.got},
                             {"oracle", r.result.first.want}};
    j.push_back(e);
  }
  return j;
}

// N whole training steps of one (layout, dispatcher), optionally resumed under another layout: the comparisons
// of all steps merged into one.
dist::RankComparison run_steps(const CheckOptions& o, const dist::CheckProblem& base, Communicator* world) {
  dist::RunProblem run;
  run.config = base.config;
  run.params = base.params;
  for (int s = 0; s < o.steps; ++s)
    run.batches.push_back(random_global_batch(base.config, o.seq, o.global_batch, o.seed + 100 + std::uint64_t(s)));
  run.layout = base.layout;
  run.options = base.options;
  run.optimizer.config.kind = o.optimizer == "sgd" ? OptimizerKind::sgd : OptimizerKind::adam;
  run.optimizer.distributed = o.distributed_optimizer;
  run.tolerance = base.tolerance;
  if (!o.resume_as.empty()) {
    run.resume_as = parse_layout(o.resume_as);
    run.checkpoint_dir = o.checkpoint_dir;
  }
  const auto oracle = dist::oracle_trajectory(run);
  const auto steps = world ? dist::check_run_on_world(*world, run, oracle) : dist::check_run_inproc(run, oracle);
  dist::RankComparison merged;
  for (const auto& s : steps) merged.merge(s);
  return merged;
}

// Runs every (layout, dispatcher) on `world` (MPI) or on in-process ranks (world == nullptr).
std::vector<Run> run_all(const CheckOptions& o, const dist::KernelBackend& kernels, Communicator* world) {
  const ModelConfig model = model_of(o);
  const ModelParams<double> params = random_model_params<double>(model, o.seed);
  const GlobalBatch batch = random_global_batch(model, o.seq, o.global_batch, o.seed + 1);
  std::vector<ParallelLayout> layouts = o.layout.world > 0 ? std::vector<ParallelLayout>{o.layout} : default_layouts();
  std::vector<dist::DispatcherKind> kinds;
  if (o.dispatcher == "all")
    kinds = {dist::DispatcherKind::alltoall, dist::DispatcherKind::allgather, dist::DispatcherKind::flex};
  else
    kinds = {dist::parse_dispatcher(o.dispatcher)};

  for (const ParallelLayout& layout : layouts) layout.validate();  // every error before any work
  std::vector<Run> runs;
  for (const ParallelLayout& layout : layouts) {
    if (world && layout.world > world->size())
      throw std::invalid_argument("layout " + layout_name(layout) + " needs " + std::to_string(layout.world) +
                                  " ranks; mpirun started " + std::to_string(world->size()));
    dist::CheckProblem problem{model, params, batch, layout, {}, {o.atol, o.rtol}};
    for (auto kind : kinds) {
      problem.options = {kind, parse_loss_mode(o.scaling), o.micro_batch};
      problem.options.kernels = &kernels;
      problem.options.precision = o.dtype == "float" ? dist::Precision::float32 : dist::Precision::float64;
      const auto start = std::chrono::steady_clock::now();
      dist::RankComparison result;
      if (o.steps > 0) {
        result = run_steps(o, problem, world);
      } else if (world) {
        const GlobalStep oracle = dist::oracle_step(problem);
        // The first layout.world ranks run it; the rest sit it out in their own color.
        auto sub = world->split(world->rank() < layout.world ? 0 : 1, world->rank());
        if (world->rank() < layout.world) result = dist::check_on_world(*sub, problem, oracle);
      } else {
        result = dist::check_inproc(problem, dist::oracle_step(problem));
      }
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      runs.push_back({layout, kind, result, seconds});
      if (!o.json && (!world || world->rank() == 0))
        std::cerr << "  " << layout_name(layout) << " " << to_string(kind) << ": " << (result.pass() ? "pass" : "FAIL")
                  << "\n";
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
      "Run the parallel MoE system and compare every rank with the oracle (default: tiny-v4 over 8 layouts × "
      "3 dispatchers)");
  cmd->add_option("--preset", o->preset, "layer preset of every MoE layer (tiny-v4, tiny-v3)")->capture_default_str();
  cmd->add_option("--world", o->layout.world, "run this one layout instead of the built-in set");
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
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir, "where --resume-as writes its checkpoint")
      ->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "adam or sgd (with --steps)")->capture_default_str();
  cmd->add_flag("--distributed-optimizer", o->distributed_optimizer,
                "shard optimizer state; reduce-scatter gradients, all-gather parameters");
  cmd->add_option("--dispatcher", o->dispatcher, "alltoall, allgather, flex or all")->capture_default_str();
  cmd->add_option("--scaling", o->scaling, "sum, avg or per-token")->capture_default_str();
  cmd->add_option("--backend", o->backend, "inproc (threads) or mpi (under mpirun)")->capture_default_str();
  cmd->add_option("--kernels", o->kernels,
                  std::string("what does the data work (row moves, grouped SwiGLU): ") + kKernelNames)
      ->capture_default_str();
  cmd->add_option("--seq", o->seq, "sequence length")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--micro-batch", o->micro_batch, "sequences per microbatch")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--global-batch", o->global_batch, "sequences per step")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--layers", o->layers, "MoE layers in the model")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--hash-layers", o->hash_layers, "of which the first n route by tid2eid")->capture_default_str();
  cmd->add_option("--seed", o->seed, "seed of parameters and batch")->capture_default_str();
  cmd->add_option("--dtype", o->dtype, "double or float: the precision the parallel system runs in")
      ->capture_default_str();
  cmd->add_option("--atol", o->atol, "absolute tolerance (default: 1e-13 double, 5e-8 float)");
  cmd->add_option("--rtol", o->rtol, "relative tolerance (default: 1e-9 double, 1e-4 float)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->callback([o] {
    if (o->backend != "inproc" && o->backend != "mpi")
      throw std::invalid_argument("unknown backend '" + o->backend + "' (inproc, mpi)");
    if (o->optimizer != "adam" && o->optimizer != "sgd")
      throw std::invalid_argument("unknown optimizer '" + o->optimizer + "' (adam, sgd)");
    if (!o->resume_as.empty() && o->steps < 2) throw std::invalid_argument("--resume-as needs --steps 2 or more");
    if (o->dtype != "double" && o->dtype != "float")
      throw std::invalid_argument("unknown dtype '" + o->dtype + "' (double, float)");
    if (o->dtype == "float" && o->steps > 0)
      throw std::invalid_argument("--steps runs in double (the optimizer state is double); drop --dtype float");
    // Per-dtype tolerances, |parallel − oracle| ≤ atol + rtol·|oracle|: double differs from the oracle by
    // reassociation only; float carries its rounding through every GEMM and collective.
    const bool single = o->dtype == "float";
    if (o->atol < 0) o->atol = single ? 5e-8 : 1e-13;
    if (o->rtol < 0) o->rtol = single ? 1e-4 : 1e-9;
    std::vector<Run> runs;
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
    const KernelChoice kernels(o->kernels);
    runs = run_all(*o, kernels.backend(), world.get());
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
