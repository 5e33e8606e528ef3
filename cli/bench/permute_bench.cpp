#include "cli/bench/permute_bench.hpp"

#include "cli/bench/bench_timing.hpp"
#include "cli/build_isa.hpp"
#include "cli/text_format.hpp"
#include "distributed/kernels/token_kernels.hpp"
#include "reference/random_init.hpp"

#include <nlohmann/json.hpp>
#include <omp.h>

#include <cstring>
#include <stdexcept>
#include <string>

namespace moe::cli {
namespace {

// memcpy of `bytes`, split into one contiguous part per thread.
void copy_on(int threads, char* to, const char* from, std::size_t bytes) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int part = 0; part < threads; ++part) {
    const std::size_t begin = bytes * std::size_t(part) / std::size_t(threads);
    const std::size_t end = bytes * std::size_t(part + 1) / std::size_t(threads);
    std::memcpy(to + begin, from + begin, end - begin);
  }
}

struct Row {
  std::string movement;
  int threads = 1;
  Timing time, copy;
};

}  // namespace

void run_permute_bench(const PermuteBenchOptions& o, std::ostream& out) {
  if (o.tokens < 1 || o.topk < 1 || o.experts < o.topk || o.hidden < 1 || o.repetitions < 1)
    throw std::invalid_argument("--permute: tokens, hidden and repetitions must be >= 1 and 1 <= topk <= experts");
  // Uniform random top-k routing; rows expert-major, tokens rising within an expert (the AlltoAll dispatcher's
  // permute order).
  SeededUniform rng(41);
  std::vector<std::vector<std::int64_t>> of_expert(static_cast<size_t>(o.experts));
  for (int t = 0; t < o.tokens; ++t) {
    std::vector<bool> taken(static_cast<size_t>(o.experts), false);
    for (int j = 0; j < o.topk;) {
      const auto e = static_cast<size_t>(rng.bits() % static_cast<std::uint64_t>(o.experts));
      if (taken[e]) continue;
      taken[e] = true;
      of_expert[e].push_back(t);
      ++j;
    }
  }
  std::vector<std::int64_t> rows;
  for (const auto& tokens : of_expert) rows.insert(rows.end(), tokens.begin(), tokens.end());

  const Matrix<double> x = rng.matrix<double>(o.tokens, o.hidden, 1.0);
  const Matrix<double> y = rng.matrix<double>(static_cast<Eigen::Index>(rows.size()), o.hidden, 1.0);
  const auto bytes = static_cast<std::size_t>(y.size()) * sizeof(double);
  std::vector<char> from(bytes, 1), to(bytes, 0);
  Matrix<double> permuted, combined = Matrix<double>::Zero(o.tokens, o.hidden);

  const int all = omp_get_max_threads();
  std::vector<Row> table;
  for (int threads : all > 1 ? std::vector<int>{1, all} : std::vector<int>{1}) {
    omp_set_num_threads(threads);
    const Timing copy = timed(o.repetitions, [&] { copy_on(threads, to.data(), from.data(), bytes); });
    table.push_back({"permute (gather rows)", threads, timed(o.repetitions, [&] {
                       kernels::gather_rows_into(x, rows, permuted);
                     }), copy});
    table.push_back({"unpermute (scatter-add rows)", threads, timed(o.repetitions, [&] {
                       combined.setZero();
                       kernels::scatter_add_rows(y, rows, {}, combined);
                     }), copy});
  }
  omp_set_num_threads(all);

  const double gb = double(bytes) / 1e9;
  if (o.json) {
    nlohmann::json j{{"moe_oracle", MOE_ORACLE_VERSION}, {"isa", built_isa()}, {"rows", rows.size()},
                     {"hidden", o.hidden}, {"bytes", bytes}, {"results", nlohmann::json::array()}};
    for (const auto& r : table)
      j["results"].push_back({{"movement", r.movement}, {"threads", r.threads}, {"seconds", r.time.median},
                              {"seconds_low", r.time.low}, {"seconds_high", r.time.high},
                              {"copy_seconds", r.copy.median}, {"percent_of_copy", 100 * r.copy.median / r.time.median}});
    out << j.dump(2) << "\n";
    return;
  }
  out << "moe-oracle bench --permute: " << o.tokens << " tokens × top-" << o.topk << " of " << o.experts
      << " experts (uniform) = " << rows.size() << " rows of h " << o.hidden << " doubles, " << mib(double(bytes))
      << " per movement; median of " << o.repetitions << " (low-high); built for " << built_isa() << "\n"
      << "copy = memcpy of the same bytes in this run, split over the same threads; both movements write into a "
         "reused buffer (a workspace), and unpermute zeroes it inside the timing (a combine starts from zero)\n\n";
  TextTable t({"movement", "threads", "time (low-high)", "GB/s", "copy", "copy GB/s", "% of copy"});
  for (const auto& r : table)
    t.add_row({r.movement, std::to_string(r.threads),
               trimmed(r.time.median * 1e3, 3) + " ms (" + trimmed(r.time.low * 1e3, 3) + "-" +
                   trimmed(r.time.high * 1e3, 3) + ")",
               trimmed(gb / r.time.median, 3), trimmed(r.copy.median * 1e3, 3) + " ms", trimmed(gb / r.copy.median, 3),
               trimmed(100 * r.copy.median / r.time.median, 1) + " %"});
  t.print(out);
}

}  // namespace moe::cli
