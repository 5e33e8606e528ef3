// `moe-oracle bench` — a benchmark that reports (docs/performance.md), not a test: the dispatch + combine time of each
// dispatcher on an EP-only layout (world = ep), against the raw MPI_Alltoallv of the same bytes in the same run
// (the practical peak of the transport), and the bytes' memcpy time on one core (the machine's copy bandwidth).
// Medians over repetitions; each repetition's time is the slowest rank's.
//
//   mpirun -np 8 moe-oracle bench --backend mpi            (ranks are processes)
//   moe-oracle bench --world 8                              (in-process ranks; raw baseline: their alltoallv)
//   moe-oracle bench --sweep -b 1K -e 256M -f 2             (every size, nccl-tests style, each output checked)
// Other benchmarks of the same command, one process each: --experts-gemm (expert_bench.hpp), --permute
// (permute_bench.hpp), --oracle (oracle_bench.hpp).
#include "cli/bench/bench_timing.hpp"
#include "cli/bench/expert_bench.hpp"
#include "cli/bench/oracle_bench.hpp"
#include "cli/bench/permute_bench.hpp"
#include "cli/build_isa.hpp"
#include "cli/choice_option.hpp"
#include "cli/cli_checks.hpp"
#include "cli/commands.hpp"
#include "cli/given_options.hpp"
#include "cli/model_options.hpp"
#include "cli/rank_backend.hpp"
#include "cli/rank_error.hpp"
#include "cli/text_format.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/comm/mpi_baseline.hpp"
#include "distributed/comm/mpi_communicator.hpp"
#include "distributed/comm/mpi_runtime.hpp"
#include "distributed/comm/row_collectives.hpp"
#include "distributed/dispatch/dispatcher.hpp"
#include "distributed/train/rank_groups.hpp"
#include "reference/random_init.hpp"

#include <malloc.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <string_view>
#include <optional>

namespace moe::cli {
namespace {

struct BenchOptions {
  Backend backend = Backend::inproc;
  int world = 4;  // inproc only; under MPI the job's size
  int tokens = 1024, hidden = 512, experts = 32, topk = 6, repetitions = 5;
  std::optional<dist::DispatcherKind> dispatcher;  // unset: all of them
  bool fresh_memory = false;
  bool json = false;
  bool experts_gemm = false;  // time the experts' grouped SwiGLU instead (expert_bench.hpp)
  bool permute = false;       // time permute / unpermute against a copy instead (permute_bench.hpp)
  bool oracle = false;        // time the oracle's layer on a V4-Flash shape instead (oracle_bench.hpp)
  ExpertPath oracle_path = ExpertPath::expert_batched;
  bool sweep = false;         // every size from begin to end (nccl-tests style)
  std::string begin = "1K", end = "256M";
  int factor = 2;
  int rank_threads = 1;  // OpenMP threads of each rank's kernels, set once before any rank runs
  int ffn = 256;
  double peak_gflops = 0;
};

// A production dispatcher reuses its buffers; ours allocates per stage, so by default the benchmark keeps freed
// memory in the process: glibc would otherwise return every large block to the OS and page-fault it back in,
// which then dominates the time. One arena, because in-process ranks are threads and glibc's thread arenas mmap
// every block above their 64 MiB heaps whatever the threshold. --fresh-memory measures the allocating path as is.
void keep_freed_memory() {
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

// OpenMP threads for each rank's kernels: the cores shared among the ranks on this machine (in process the world;
// under Open MPI its local size), unless OMP_NUM_THREADS says otherwise. Two ranks on two cores that each start a
// team of two for every gather oversubscribe the cores (in process, AllGather: 55-66% of the raw all-to-all with
// full teams, 67-72% shared, 2026-12-03).
int openmp_threads_per_rank(const BenchOptions& o) {
#ifdef _OPENMP
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return omp_get_max_threads();
  int here = o.world;
  if (o.backend == Backend::mpi) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    here = local != nullptr ? std::max(1, std::atoi(local)) : 1;
  }
  return std::max(1, omp_get_max_threads() / here);
#else
  (void)o;
  return 1;
#endif
}

double slowest(Communicator& world, double seconds) {
  world.allreduce<double>(std::span<double>(&seconds, 1), ReduceOp::max);
  return seconds;
}

struct Result {
  std::string dispatcher;
  double seconds = 0, raw_seconds = 0, copy_seconds = 0;
  int tokens = 0;           // per rank
  std::int64_t bytes = 0;  // sent by the slowest-bytes rank, dispatch + combine
  std::int64_t wrong = 0;  // output elements, over all ranks, that differ from the expected sum
};

// Median over repetitions (after one warm-up) of the slowest rank's time of `f`.
template <typename F>
double timed(Communicator& world, int repetitions, const F& f) {
  std::vector<double> times;
  for (int rep = -1; rep < repetitions; ++rep) {
    world.barrier();
    const double start = now();
    f();
    const double elapsed = slowest(world, now() - start);
    if (rep >= 0) times.push_back(elapsed);
  }
  return median(times);
}

// One rank's part: uniform random top-k routing, identity experts, dispatch + combine timed.
Result bench_rank(Communicator& world, const BenchOptions& o, dist::DispatcherKind kind, bool mpi) {
#ifdef _OPENMP
  omp_set_num_threads(o.rank_threads);  // per thread: each in-process rank sets its own
#endif
  ParallelLayout layout;
  layout.world = world.size();
  layout.ep = world.size();
  const ProcessGroups groups(layout);
  const dist::RankGroups comms(world, groups);
  SeededUniform rng(17 + static_cast<std::uint64_t>(world.rank()));
  // Token values on a grid of 1/256 in [-4, 4): every sum of k copies is exact in any order or grouping, so the
  // output check below is exact whatever the dispatcher's reduction order.
  Matrix<double> x(o.tokens, o.hidden);
  for (Eigen::Index i = 0; i < x.size(); ++i) x.data()[i] = double(std::int64_t(rng.bits() % 2048) - 1024) / 256;
  Matrix<double> probs = Matrix<double>::Zero(o.tokens, o.experts);
  BoolMatrix map = BoolMatrix::Constant(o.tokens, o.experts, false);
  for (int t = 0; t < o.tokens; ++t)
    for (int j = 0; j < o.topk;) {
      const auto e = static_cast<Eigen::Index>(rng.bits() % static_cast<std::uint64_t>(o.experts));
      if (map(t, e)) continue;
      map(t, e) = true;
      probs(t, e) = 1.0 / o.topk;
      ++j;
    }

  Result r;
  r.dispatcher = std::string(to_string(kind));
  r.tokens = o.tokens;
  Matrix<double> y;
  std::vector<std::int64_t> sent(static_cast<size_t>(world.size()), 0), received = sent;
  // One dispatcher for every repetition, as a layer keeps its own across steps.
  auto d = dist::make_dispatcher<double>(kind, comms.dispatch(), o.experts);
  r.seconds = timed(world, o.repetitions, [&] { y = d->combine(d->dispatch(x, probs, map).x); });
  // Every run checks its output: with identity experts a token comes back as k times itself, exactly.
  std::int64_t wrong = (y.array() != double(o.topk) * x.array()).count();
  world.allreduce<std::int64_t>(std::span<std::int64_t>(&wrong, 1), ReduceOp::sum);
  r.wrong = wrong;

  // The same bytes through the raw transport: what AlltoAll must move (token rows to each expert's rank).
  for (Eigen::Index t = 0; t < map.rows(); ++t)
    for (int e = 0; e < o.experts; ++e)
      if (map(t, e)) sent[static_cast<size_t>(e / (o.experts / world.size()))] += o.hidden * 8;
  world.alltoallv<std::int64_t>(sent, std::vector<std::int64_t>(sent.size(), 1), received,
                                std::vector<std::int64_t>(sent.size(), 1));
  std::vector<double> raw;
  if (mpi) {
    const auto there = time_raw_alltoallv(sent, received, o.repetitions);
    const auto back = time_raw_alltoallv(received, sent, o.repetitions);
    for (size_t i = 0; i < there.size(); ++i) raw.push_back(there[i] + back[i]);
  } else {
    // Rows are doubles, so the byte counts are whole numbers of elements.
    auto elements = [](std::vector<std::int64_t> v) {
      for (auto& c : v) c /= 8;
      return v;
    };
    std::vector<double> send_buf(static_cast<size_t>(dist::total(sent) / 8));
    std::vector<double> recv_buf(static_cast<size_t>(dist::total(received) / 8));
    const auto sent_elements = elements(sent), received_elements = elements(received);
    raw.push_back(2 * timed(world, o.repetitions, [&] {  // there and back
      world.alltoallv<double>(send_buf, sent_elements, recv_buf, received_elements);
    }));
  }
  r.raw_seconds = median(raw);

  // One core copying the same bytes (dispatch and combine): the machine's copy bandwidth in this run.
  std::int64_t bytes = 2 * dist::total(sent);
  world.allreduce<std::int64_t>(std::span<std::int64_t>(&bytes, 1), ReduceOp::max);
  r.bytes = bytes;
  std::vector<char> a(static_cast<size_t>(bytes / 2) + 1, 1), b(a.size());
  std::vector<double> copies;
  for (int rep = 0; rep < o.repetitions; ++rep) {
    const double start = now();
    std::memcpy(b.data(), a.data(), a.size());
    std::memcpy(a.data(), b.data(), a.size());
    copies.push_back(now() - start);
  }
  r.copy_seconds = median(copies);
  return r;
}

// nccl-tests' convention for all-to-all: algbw = bytes / time, busbw = algbw · (n − 1) / n (the share of the bytes
// that crosses ranks). Here bytes = the routed rows there and back of the busiest rank.
double algbw(const Result& r) { return double(r.bytes) / r.seconds / 1e9; }
double busbw(const Result& r, int world) { return algbw(r) * (world - 1) / world; }

void report(const std::vector<Result>& results, const BenchOptions& o, int world) {
  if (o.json) {
    nlohmann::json j{{"moe_oracle", MOE_ORACLE_VERSION}, {"isa", built_isa()}, {"world", world},
                     {"openmp_threads_per_rank", o.rank_threads},
                     {"results", nlohmann::json::array()}};
    for (const auto& r : results)
      j["results"].push_back({{"dispatcher", r.dispatcher}, {"tokens", r.tokens}, {"seconds", r.seconds},
                              {"raw_alltoallv_seconds", r.raw_seconds}, {"memcpy_seconds", r.copy_seconds},
                              {"bytes", r.bytes}, {"algbw_gbps", algbw(r)}, {"busbw_gbps", busbw(r, world)},
                              {"wrong", r.wrong}});
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::cout << "moe-oracle bench" << (o.sweep ? " --sweep" : "") << ": EP" << world << " (" << name_of(o.backend) << "), "
            << (o.sweep ? std::string("tokens/rank from the size") : std::to_string(o.tokens) + " tokens/rank")
            << " × h " << o.hidden << " (double), " << o.experts << " experts, top-" << o.topk
            << ", uniform routing, identity experts; median of " << o.repetitions << ", slowest rank; "
            << (o.fresh_memory ? "fresh allocations" : "freed memory kept for reuse") << "; "
            << o.rank_threads << " OpenMP thread(s) per rank; built for " << built_isa() << "\n"
            << "routed bytes = the rows the busiest rank must send to experts and get back (AllGather moves other "
            << "bytes, the same rows reach the experts); raw = MPI_Alltoallv of those bytes (there and back) in this "
            << "run; memcpy = one core copying them; algbw = routed bytes / time, busbw = algbw · (n−1)/n; #wrong = "
            << "output elements, all ranks, not exactly k × the token\n\n";
  TextTable t({"routed bytes", "tokens/rank", "dispatcher", "dispatch+combine", "algbw GB/s", "busbw GB/s",
               "% of raw alltoallv", "% of memcpy", "#wrong"});
  for (const auto& r : results)
    t.add_row({mib(double(r.bytes)), std::to_string(r.tokens), r.dispatcher, trimmed(r.seconds * 1e3, 3) + " ms",
               trimmed(algbw(r), 3), trimmed(busbw(r, world), 3), trimmed(100 * r.raw_seconds / r.seconds, 1) + " %",
               trimmed(100 * r.copy_seconds / r.seconds, 1) + " %", std::to_string(r.wrong)});
  t.print(std::cout);
}

// "1K", "64M", "1G", "4096": bytes.
std::int64_t parse_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    throw std::invalid_argument("size '" + text + "': a number with an optional K, M or G");
  }
  const std::string unit = text.substr(used);
  constexpr std::string_view kUnits = "KMG";  // 2^10, 2^20, 2^30
  const std::size_t power = unit.size() == 1 ? kUnits.find(unit[0]) : std::string_view::npos;
  const double scale = unit.empty() ? 1 : power != std::string_view::npos ? std::ldexp(1.0, 10 * int(power + 1)) : 0;
  if (scale == 0 || !(value > 0)) throw std::invalid_argument("size '" + text + "': a positive number with K, M or G");
  if (value * scale > 0x1p50) throw std::invalid_argument("size '" + text + "': more than 1 PiB per rank");
  return static_cast<std::int64_t>(value * scale);
}

// The token counts of a sweep: routed bytes per rank (tokens · k · h · 8, one way) from begin to end by factor,
// each rounded to whole tokens (at least one), repeats dropped.
std::vector<int> sweep_tokens(const BenchOptions& o) {
  const std::int64_t begin = parse_size(o.begin), end = parse_size(o.end);
  if (end < begin || o.factor < 2) throw std::invalid_argument("--sweep: need -b <= -e and -f >= 2");
  const double per_token = 8.0 * o.topk * o.hidden;
  std::vector<int> out;
  for (double size = double(begin); size <= double(end); size *= o.factor) {
    const double whole = std::max(1.0, std::round(size / per_token));
    if (whole > std::numeric_limits<int>::max())
      throw std::invalid_argument("--sweep: " + std::to_string(std::int64_t(size)) + " bytes is more than " +
                                  std::to_string(std::numeric_limits<int>::max()) + " tokens per rank");
    const int tokens = static_cast<int>(whole);
    if (out.empty() || out.back() != tokens) out.push_back(tokens);
  }
  return out;
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = app.add_subcommand("bench", "Time each dispatcher's dispatch + combine against raw MPI_Alltoallv");
  // Not nccl: bench times the dispatchers on host data; the GPU's figures come from cuda_bench (tools/gpu-check).
  add_choice(*cmd, "--backend", o->backend, "where the ranks run: threads of this process, or mpirun's processes",
             std::span<const Named<Backend>>(kBackendNames).first(2),
             "bench times host data; the GPU's figures come from cuda_bench, run by tools/gpu-check");
  cmd->add_option("--world", o->world, "ranks for the inproc backend (= ep)")->capture_default_str()->check(whole_at_least(1));
  cmd->add_option("--tokens", o->tokens, "tokens per rank")->capture_default_str()->check(whole_at_least(1));
  cmd->add_option("--hidden", o->hidden, "hidden size")->capture_default_str()->check(whole_at_least(1));
  cmd->add_option("--experts", o->experts, "routed experts (divisible by the world)")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd->add_option("--topk", o->topk, "experts per token")->capture_default_str()->check(whole_at_least(1));
  cmd->add_option("--repetitions", o->repetitions, "timed repetitions (one warm-up before)")
      ->capture_default_str()
      ->check(CLI::Range(1, 100000));
  add_choice(*cmd, "--dispatcher", o->dispatcher, "the token dispatchers to time", "all");
  cmd->add_flag("--fresh-memory", o->fresh_memory, "let freed buffers go back to the OS (page faults included)");
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_flag("--experts-gemm", o->experts_gemm,
                "time one rank's grouped SwiGLU (forward, backward) against a dense Eigen GEMM instead; --experts "
                "are then its local experts");
  cmd->add_option("--ffn", o->ffn, "expert FFN width (with --experts-gemm)")
      ->capture_default_str()
      ->check(whole_at_least(1));
  cmd->add_option("--peak-gflops", o->peak_gflops,
                  "with --experts-gemm: the CPU's double-precision peak (GFLOP/s, all threads), the named limit");
  cmd->add_flag("--permute", o->permute,
                "time permute and unpermute (the row gather and scatter-add of every dispatcher) against a memcpy "
                "of the same bytes, on one thread and on all, instead");
  cmd->add_flag("--oracle", o->oracle,
                "time the oracle's own layer forward + backward on a V4-Flash shape (h 4096, FFN 2048, top-6; "
                "--tokens, default 2048 here; --experts, default 16 here) against a dense GEMM, instead");
  add_oracle_path_option(*cmd, o->oracle_path);  // with --oracle
  cmd->add_flag("--sweep", o->sweep, "run every size from -b to -e (routed bytes per rank, one way), like nccl-tests");
  cmd->add_option("-b,--begin", o->begin, "smallest size of --sweep (K, M, G suffixes)")->capture_default_str();
  cmd->add_option("-e,--end", o->end, "largest size of --sweep")->capture_default_str();
  cmd->add_option("-f,--factor", o->factor, "size factor between steps of --sweep")
      ->capture_default_str()
      ->check(CLI::Range(2, 1024));
  cmd->callback([o, cmd] {
    const int modes = int(o->experts_gemm) + int(o->permute) + int(o->oracle) + int(o->sweep);
    if (cmd->count("--oracle-path") && !o->oracle) throw std::invalid_argument("--oracle-path needs --oracle");
    if (modes > 1) throw std::invalid_argument("bench: choose one of --experts-gemm, --permute, --oracle, --sweep");
    if ((o->experts_gemm || o->permute || o->oracle) && o->backend != Backend::inproc)
      throw std::invalid_argument("--experts-gemm, --permute and --oracle run on one process; drop --backend");
    if (o->oracle) {
      OracleBenchOptions b;
      b.json = o->json;
      if (cmd->count("--tokens")) b.tokens = o->tokens;
      if (cmd->count("--experts")) b.experts = o->experts;
      if (cmd->count("--hidden")) b.hidden = o->hidden;
      if (cmd->count("--ffn")) b.ffn = o->ffn;
      b.topk = o->topk;
      b.path = o->oracle_path;
      run_oracle_bench(b, std::cout);
      return;
    }
    const std::vector<int> token_counts = o->sweep ? sweep_tokens(*o) : std::vector<int>{o->tokens};
    // Per rank: the tokens, their k routed copies there and back and the dispatchers' staging (about 8 rows of h
    // per routed token), or for --experts-gemm the local experts' weights and the SwiGLU activations.
    MemoryEstimate memory;
    const double routed = 1.0 * token_counts.back() * o->topk, ranks = o->backend == Backend::inproc ? o->world : 1;
    memory.activations = 8.0 * ranks * routed * (8.0 * o->hidden + (o->experts_gemm ? 6.0 * o->ffn : 0));
    if (o->experts_gemm) memory.parameters = 8.0 * 2 * 3.0 * o->experts * o->hidden * o->ffn;
    if (o->backend == Backend::inproc && !o->experts_gemm && !o->permute) {  // bench_rank's in-process world, EP only
      ParallelLayout layout;
      layout.world = layout.ep = o->world;
      memory.ranks = static_cast<double>(dist::inproc_world_bytes(ProcessGroups(layout)));
    }
    require_fits(memory, "this benchmark", "give smaller --tokens / --hidden / --world");
    if (o->experts_gemm) {
      run_expert_bench({o->tokens, o->topk, o->experts, o->hidden, o->ffn, o->repetitions, o->json,
                        o->peak_gflops}, std::cout);
      return;
    }
    if (o->permute) {
      run_permute_bench({o->tokens, o->topk, o->experts, o->hidden, o->repetitions, o->json}, std::cout);
      return;
    }
    if (!o->fresh_memory) keep_freed_memory();
    // Once, from the process's own default: under MPI the ranks run on this thread, and each run's setting would
    // otherwise be the next one's starting point (halving it on every dispatcher).
    o->rank_threads = openmp_threads_per_rank(*o);
    if (o->topk > o->experts) throw std::invalid_argument("--topk must not exceed --experts");
    const std::vector<dist::DispatcherKind> kinds =
        o->dispatcher ? std::vector{*o->dispatcher} : all_values<dist::DispatcherKind>();
    std::vector<Result> results;
    // Every size of the run (one without --sweep), each through every chosen dispatcher.
    auto for_each_size = [&](auto&& bench) {
      for (int tokens : token_counts) {
        BenchOptions sized = *o;
        sized.tokens = tokens;
        for (auto k : kinds) bench(sized, k);
      }
    };
    if (o->backend == Backend::mpi) {
      int argc = 0;
      char** argv = nullptr;
      bool failed = false;
      {
        MpiRuntime mpi(argc, argv);
        MpiCommunicator world(mpi);
        try {
          require_same_options(world, given_options(*cmd));  // before any work: ranks must time one problem
          if (o->experts % world.size())
            throw std::invalid_argument("--experts " + std::to_string(o->experts) + " must divide by the " +
                                        std::to_string(world.size()) + " ranks");
          for_each_size([&](const BenchOptions& sized, dist::DispatcherKind k) {
            results.push_back(bench_rank(world, sized, k, true));
          });
          if (world.rank() == 0) report(results, *o, world.size());
        } catch (const std::exception& e) {
          end_job_on_error(mpi, world, e.what());
          failed = true;  // alone (no mpirun): MPI ends normally first
        }
      }
      if (failed) throw CLI::RuntimeError(2);
      return;
    }
    if (o->experts % o->world) throw std::invalid_argument("--experts must divide by --world");
    for_each_size([&](const BenchOptions& sized, dist::DispatcherKind k) {
      std::mutex mu;
      InprocWorld(o->world, RankExecution::threads).run([&](Communicator& world) {  // concurrent transfers
        Result r = bench_rank(world, sized, k, false);
        std::lock_guard<std::mutex> lock(mu);
        if (world.rank() == 0) results.push_back(r);
      });
    });
    report(results, *o, o->world);
  });
}

}  // namespace moe::cli
