// The three dispatchers on in-process ranks, for layouts with EP, ETP, TP ≠ ETP and a zero-token rank:
//   provenance — every row a rank receives for a local expert is (source rank, token) of exactly the
//                assignments the routing maps of its tp_ep domain name (DeepEP's tests tag rows the same way);
//   identity   — with experts out = p·x (split over ETP shards), combine returns Σ_e p_{t,e}·x_t per token;
//   adjoint    — combine_backward and dispatch_backward are the transposes of combine and dispatch
//                (Σ over ranks of ⟨A u, v⟩ = ⟨u, Aᵀ v⟩), which is what makes the backward exact.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <mutex>
#include <set>
#include <tuple>

#include "distributed/comm/inproc_world.hpp"
#include "distributed/dispatch/allgather_dispatcher.hpp"
#include "distributed/dispatch/alltoall_dispatcher.hpp"
#include "distributed/dispatch/flex_dispatcher.hpp"
#include "distributed/train/rank_groups.hpp"
#include "reference/random_init.hpp"

namespace moe::dist {
namespace {

struct Case {
  ParallelLayout layout;
  int experts;
  DispatcherKind kind;
  // The large-size path forced: AlltoAll exchanging straight into the sorted order (alltoall_dispatcher.hpp),
  // Flex and AllGather with their selection of expert rows and their combine fused into the exchange.
  bool direct = false;
};

std::string name_of(const Case& c) {
  const char* forced = !c.direct ? "" : c.kind == DispatcherKind::alltoall ? "_direct" : "_fused";
  return std::string(to_string(c.kind)) + forced + "_w" + std::to_string(c.layout.world) +
         "_tp" + std::to_string(c.layout.tp) + "_ep" + std::to_string(c.layout.ep) + "_etp" +
         std::to_string(c.layout.etp);
}

// gtest prints parameters in test names and failures: the name identifies a case.
void PrintTo(const Case& c, std::ostream* os) { *os << name_of(c); }

std::vector<Case> cases() {
  std::vector<Case> out;
  for (auto kind : all_values<DispatcherKind>())
    for (auto l : {ParallelLayout{.world = 1}, ParallelLayout{.world = 2, .ep = 2},
                   ParallelLayout{.world = 4, .ep = 2, .etp = 2}, ParallelLayout{.world = 4, .tp = 2, .ep = 2},
                   ParallelLayout{.world = 4, .ep = 4}, ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2},
                   ParallelLayout{.world = 8, .ep = 4, .etp = 2}})
      out.push_back({l, 8, kind});
  // The direct exchange is taken above a size the small cases never reach: force it (etp = 1 layouts only).
  for (auto l : {ParallelLayout{.world = 2, .ep = 2}, ParallelLayout{.world = 4, .tp = 2, .ep = 2},
                 ParallelLayout{.world = 4, .ep = 4}})
    out.push_back({l, 8, DispatcherKind::alltoall, true});
  for (auto l : {ParallelLayout{.world = 2, .ep = 2}, ParallelLayout{.world = 4, .ep = 2, .etp = 2},
                 ParallelLayout{.world = 4, .ep = 4}, ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2}})
    for (auto kind : {DispatcherKind::flex, DispatcherKind::allgather}) out.push_back({l, 8, kind, true});
  return out;
}

// Rank r's tokens: rank 1 has none (a zero-token rank); rows carry (rank, token) in their first two columns.
struct LocalTokens {
  Matrix<double> x;
  Matrix<double> probs;
  BoolMatrix map;
};

LocalTokens local_tokens(int rank, int experts, int k) {
  const int n = rank == 1 ? 0 : 3 + rank % 3;
  SeededUniform rng(100 + static_cast<std::uint64_t>(rank));
  LocalTokens t{rng.matrix<double>(n, 4, 1.0), Matrix<double>::Zero(n, experts),
                BoolMatrix::Constant(n, experts, false)};
  for (int i = 0; i < n; ++i) {
    t.x(i, 0) = rank;
    t.x(i, 1) = i;
    std::vector<int> order(static_cast<size_t>(experts));
    std::iota(order.begin(), order.end(), 0);
    for (int j = 0; j < k; ++j) {
      std::swap(order[static_cast<size_t>(j)],
                order[static_cast<size_t>(j) + rng.bits() % static_cast<std::uint64_t>(experts - j)]);
      const int e = order[static_cast<size_t>(j)];
      t.map(i, e) = true;
      t.probs(i, e) = 0.5 + 0.25 * rng.next();
    }
  }
  return t;
}

double inner(const Matrix<double>& a, const Matrix<double>& b) { return (a.array() * b.array()).sum(); }

class DispatcherTest : public ::testing::TestWithParam<Case> {};

TEST_P(DispatcherTest, ProvenanceIdentityAndAdjoint) {
  const Case c = GetParam();
  const ProcessGroups groups(c.layout);
  const int k = 3;
  std::mutex mu;
  double lhs_combine = 0, rhs_combine = 0, lhs_dispatch = 0, rhs_dispatch = 0;

  InprocWorld(c.layout.world).run([&](Communicator& world) {
    RankGroups g(world, groups);
    const int rank = world.rank();
    const LocalTokens t = local_tokens(rank, c.experts, k);
    std::unique_ptr<Dispatcher<double>> d;
    if (!c.direct) d = make_dispatcher<double>(c.kind, g.dispatch(), c.experts);
    else if (c.kind == DispatcherKind::flex)
      d = std::make_unique<FlexDispatcher<double>>(g.dispatch(), c.experts, cpu_kernels(), 0);
    else if (c.kind == DispatcherKind::allgather)
      d = std::make_unique<AllGatherDispatcher<double>>(g.dispatch(), c.experts, cpu_kernels(), 0);
    else d = std::make_unique<AlltoAllDispatcher<double>>(g.dispatch(), c.experts, cpu_kernels(), 0);
    const ExpertRows<double> rows = d->dispatch(t.x, t.probs, t.map);

    // Provenance: the (source, token) pairs expected for each local expert, from every rank of the domain.
    const ExpertRange mine = groups.experts_of(rank, c.experts);
    std::vector<std::multiset<std::pair<int, int>>> expected(static_cast<size_t>(mine.count)), got = expected;
    for (int src : groups.group(GroupKind::tp_ep, rank)) {
      const LocalTokens s = local_tokens(src, c.experts, k);
      for (Eigen::Index i = 0; i < s.map.rows(); ++i)
        for (int j = 0; j < mine.count; ++j)
          if (s.map(i, mine.first + j)) expected[static_cast<size_t>(j)].insert({src, static_cast<int>(i)});
    }
    Eigen::Index row = 0;
    for (int j = 0; j < mine.count; ++j)
      for (std::int64_t r = 0; r < rows.group_sizes[static_cast<size_t>(j)]; ++r, ++row)
        got[static_cast<size_t>(j)].insert({static_cast<int>(rows.x(row, 0)), static_cast<int>(rows.x(row, 1))});
    for (int j = 0; j < mine.count; ++j)
      EXPECT_EQ(got[static_cast<size_t>(j)], expected[static_cast<size_t>(j)])
          << "rank " << rank << " expert " << mine.first + j;

    // Identity experts, out = p·x split evenly over the ETP shards: combine gives Σ_e p·x.
    const double etp = g.expt_tp->size();
    Matrix<double> out = (rows.x.array().colwise() * rows.probs.array()).matrix() / etp;
    const Matrix<double> y = d->combine(out);
    for (Eigen::Index i = 0; i < t.x.rows(); ++i)
      EXPECT_LT((y.row(i) - t.probs.row(i).sum() * t.x.row(i)).cwiseAbs().maxCoeff(), 1e-14) << "rank " << rank;

    // Adjoint: ⟨combine(out), v⟩ summed over ranks = ⟨out, combine_backward(v)⟩ summed over ranks; likewise
    // ⟨dispatch(x, p), (g, gp)⟩ = ⟨(x, p), dispatch_backward(g, gp)⟩ (p restricted to the map).
    SeededUniform rng(7 + static_cast<std::uint64_t>(rank));
    const Matrix<double> v = rng.matrix<double>(t.x.rows(), t.x.cols(), 1.0);
    const Matrix<double> g_rows = rng.matrix<double>(rows.x.rows(), rows.x.cols(), 1.0);
    const Vector<double> g_probs = rng.matrix<double>(rows.x.rows(), 1, 1.0);
    const Matrix<double> back = d->combine_backward(v);
    Matrix<double> d_tokens, d_probs;
    d->dispatch_backward(g_rows, g_probs, d_tokens, d_probs);
    const Matrix<double> masked_probs = t.probs.cwiseProduct(t.map.cast<double>());
    std::lock_guard<std::mutex> lock(mu);
    lhs_combine += inner(y, v);
    rhs_combine += inner(out, back);
    // Each ETP shard receives the same rows: the dispatch "output" is one copy per shard.
    lhs_dispatch += inner(rows.x, g_rows) + rows.probs.dot(g_probs);
    rhs_dispatch += inner(t.x, d_tokens) + inner(masked_probs, d_probs);
  });
  EXPECT_NEAR(lhs_combine, rhs_combine, 1e-11);
  EXPECT_NEAR(lhs_dispatch, rhs_dispatch, 1e-11);
}

INSTANTIATE_TEST_SUITE_P(Layouts, DispatcherTest, ::testing::ValuesIn(cases()),
                         [](const auto& param_info) { return name_of(param_info.param); });

// Two paths of one dispatcher that only move the same rows differently: dispatch, combine and both backward passes
// give the same bits, in the same row order. make(g, large) builds the dispatcher forced onto its large-size path
// (large) or kept off it; tokens select k of 8 experts.
template <typename Make>
void expect_same_bits(std::initializer_list<ParallelLayout> layouts, int k, const Make& make) {
  for (auto layout : layouts) {
    const ProcessGroups groups(layout);
    std::mutex mu;
    int compared = 0;
    InprocWorld(layout.world).run([&](Communicator& world) {
      RankGroups g(world, groups);
      const LocalTokens t = local_tokens(world.rank(), 8, k);
      const auto large = make(g, true), small = make(g, false);
      const ExpertRows<double> a = large->dispatch(t.x, t.probs, t.map), b = small->dispatch(t.x, t.probs, t.map);
      SeededUniform rng(9 + static_cast<std::uint64_t>(world.rank()));
      const Matrix<double> out = rng.matrix<double>(a.x.rows(), a.x.cols(), 1.0);
      const Matrix<double> v = rng.matrix<double>(t.x.rows(), t.x.cols(), 1.0);
      const Vector<double> gp = rng.matrix<double>(a.x.rows(), 1, 1.0);
      Matrix<double> dx_a, dp_a, dx_b, dp_b;
      large->dispatch_backward(out, gp, dx_a, dp_a);
      small->dispatch_backward(out, gp, dx_b, dp_b);
      // Every collective runs on every rank before any comparison (a short-circuit would leave peers waiting).
      const Matrix<double> y_a = large->combine(out), y_b = small->combine(out);
      const Matrix<double> g_a = large->combine_backward(v), g_b = small->combine_backward(v);
      const bool same = a.x == b.x && a.probs == b.probs && a.group_sizes == b.group_sizes && y_a == y_b &&
                        g_a == g_b && dx_a == dx_b && dp_a == dp_b;
      std::lock_guard<std::mutex> lock(mu);
      EXPECT_TRUE(same) << "w" << layout.world << " ep" << layout.ep << " etp" << layout.etp << " rank "
                        << world.rank();
      compared += a.x.rows() > 0;
    });
    EXPECT_GT(compared, 0);
  }
}

// make for expect_same_bits: dispatcher D on its large-size path from 0 bytes, or never on it.
template <template <typename> class D>
auto forced() {
  return [](RankGroups& g, bool large) {
    return std::make_unique<D<double>>(g.dispatch(), 8, cpu_kernels(),
                                       large ? 0 : std::numeric_limits<std::int64_t>::max());
  };
}

TEST(AlltoAllDirectExchange, GivesTheSortGathersBits) {
  expect_same_bits({ParallelLayout{.world = 2, .ep = 2}, ParallelLayout{.world = 4, .tp = 2, .ep = 2},
                    ParallelLayout{.world = 4, .ep = 4}},
                   3, forced<AlltoAllDispatcher>());
}

// Six of eight experts: most tokens select three or four of a rank's experts, whose rows the fused combine sums
// as it reads them; in another order than the scatter-add's the low bits would differ.
TEST(FlexFusedExchange, GivesTheLocalPermuteAndCombinesBits) {
  expect_same_bits({ParallelLayout{.world = 2, .ep = 2}, ParallelLayout{.world = 4, .ep = 2, .etp = 2},
                    ParallelLayout{.world = 4, .ep = 4}, ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2}},
                   6, forced<FlexDispatcher>());
}

// As for Flex: a token's expert rows on one rank are summed as they are read, then the ranks' sums in rank order,
// as the scatter-add and the reduce-scatter do.
TEST(AllGatherFusedExchange, GivesTheGatherScatterAddAndReduceScattersBits) {
  expect_same_bits({ParallelLayout{.world = 2, .ep = 2}, ParallelLayout{.world = 4, .ep = 2, .etp = 2},
                    ParallelLayout{.world = 4, .ep = 4}, ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2}},
                   6, forced<AllGatherDispatcher>());
}

}  // namespace
}  // namespace moe::dist
