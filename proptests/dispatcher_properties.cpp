// Properties of the three token dispatchers on in-process ranks, in double and in float (the dispatchers are
// templated on the scalar; the training step is double only):
//   identity   — dispatch → experts that return p·x (split evenly over the ETP shards) → combine gives
//                Σ_k p_k·x_t for every token (the oracle of this pipeline is that formula);
//   provenance — rows tagged (source rank, token) arrive at exactly the local experts the routing maps of the
//                tp_ep domain name, once per assignment, with the assignment's probability (as DeepEP's tests tag
//                rows with their source).
// Token counts per rank include zero, and "hot" cases send every token to the first EP rank's experts.
#include "proptests/generators.hpp"
#include "proptests/property.hpp"

#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/rank_groups.hpp"
#include "reference/random_init.hpp"

#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

namespace moe::proptest {
namespace {

struct DispatchCase {
  ParallelLayout layout;
  int experts = 0;
  int topk = 1;
  dist::DispatcherKind kind = dist::DispatcherKind::alltoall;
  std::vector<int> tokens;  // per rank
  bool hot = false;         // every token picks experts 0 … k−1
  std::uint64_t seed = 0;
};

void showValue(const DispatchCase& c, std::ostream& os) {
  os << describe(c.layout) << " | " << dist::to_string(c.kind) << " E=" << c.experts << " k=" << c.topk
     << (c.hot ? " hot" : "") << " tokens=[";
  for (size_t i = 0; i < c.tokens.size(); ++i) os << (i ? "," : "") << c.tokens[i];
  os << "] seed=" << c.seed;
}

rc::Gen<DispatchCase> dispatch_cases() {
  return rc::gen::exec([] {
    DispatchCase c;
    c.experts = *rc::gen::element(2, 4, 8);
    c.layout = *dispatch_layouts(c.experts);
    c.topk = *rc::gen::inRange(1, std::min(c.experts, 3) + 1);
    c.kind = *rc::gen::elementOf(all_values<dist::DispatcherKind>());
    for (int r = 0; r < c.layout.world; ++r) c.tokens.push_back(weighted<int>({{2, 1}, {1, 0}, {2, 3}, {1, 7}}));
    c.hot = weighted<bool>({{3, false}, {1, true}});
    c.seed = *rc::gen::inRange<std::uint64_t>(0, 1000);
    return c;
  });
}

// Rank r's tokens: x with (r, t) in its first two columns, k distinct experts per token, probabilities in
// [0.25, 1) on the map (multiples of 2⁻⁸, exact in float).
template <typename T>
struct RankTokens {
  Matrix<T> x, probs;
  BoolMatrix map;
};

template <typename T>
RankTokens<T> rank_tokens(const DispatchCase& c, int rank) {
  const int n = c.tokens[static_cast<size_t>(rank)];
  SeededUniform rng(c.seed * 1000 + static_cast<std::uint64_t>(rank));
  RankTokens<T> t{rng.matrix<T>(n, 4, 1.0), Matrix<T>::Zero(n, c.experts), BoolMatrix::Constant(n, c.experts, false)};
  for (int i = 0; i < n; ++i) {
    t.x(i, 0) = static_cast<T>(rank);
    t.x(i, 1) = static_cast<T>(i);
    std::vector<int> order(static_cast<size_t>(c.experts));
    std::iota(order.begin(), order.end(), 0);
    for (int j = 0; j < c.topk; ++j) {
      if (!c.hot)
        std::swap(order[static_cast<size_t>(j)],
                  order[static_cast<size_t>(j) + rng.bits() % static_cast<std::uint64_t>(c.experts - j)]);
      const int e = order[static_cast<size_t>(j)];
      t.map(i, e) = true;
      t.probs(i, e) = static_cast<T>(0.25 + 0.75 * static_cast<double>(rng.bits() % 256) / 256.0);
    }
  }
  return t;
}

// The token-movement row of reference/tolerance.hpp for T.
template <typename T>
Tolerance movement_tolerance() {
  return tolerance(Compared::token_movement, std::is_same_v<T, float> ? Precision::float32 : Precision::float64);
}

// Runs fn(rank, groups, dispatcher, tokens, rows) on every rank; failures are collected and reported once.
template <typename T, typename Fn>
void on_every_rank(const DispatchCase& c, Fn fn) {
  const ProcessGroups groups(c.layout);
  std::mutex mu;
  std::string failure;
  InprocWorld(c.layout.world).run([&](Communicator& world) {
    const dist::RankGroups comms(world, groups);
    const int rank = world.rank();
    const RankTokens<T> t = rank_tokens<T>(c, rank);
    auto d = dist::make_dispatcher<T>(c.kind, comms.dispatch(), c.experts);
    const dist::ExpertRows<T> rows = d->dispatch(t.x, t.probs, t.map);
    const std::string why = fn(rank, groups, comms, *d, t, rows);
    std::lock_guard<std::mutex> lock(mu);
    if (!why.empty() && failure.empty()) failure = "rank " + std::to_string(rank) + ": " + why;
  });
  if (!failure.empty()) RC_FAIL(failure);
}

template <typename T>
void identity_experts_combine(const DispatchCase& c) {
  RC_TAG(c.hot ? "hot" : "spread");
  on_every_rank<T>(c, [&](int, const ProcessGroups&, const dist::RankGroups& comms, dist::Dispatcher<T>& d,
                          const RankTokens<T>& t, const dist::ExpertRows<T>& rows) -> std::string {
    const T shards = static_cast<T>(comms.expt_tp->size());
    const Matrix<T> out = (rows.x.array().colwise() * rows.probs.array()).matrix() / shards;
    const Matrix<T> y = d.combine(out);
    if (y.rows() != t.x.rows()) return "combine returned " + std::to_string(y.rows()) + " rows";
    const Tolerance tol = movement_tolerance<T>();
    for (Eigen::Index i = 0; i < t.x.rows(); ++i) {
      const RowVector<T> want = t.probs.row(i).sum() * t.x.row(i);
      for (Eigen::Index j = 0; j < want.size(); ++j)
        if (!tol.admits(static_cast<double>(y(i, j)), static_cast<double>(want(j)))) {
          std::ostringstream os;
          os << "token " << i << " column " << j << ": combine gives " << y(i, j) << ", Σ p·x is " << want(j);
          return os.str();
        }
    }
    return "";
  });
}

template <typename T>
void provenance_tags(const DispatchCase& c) {
  RC_TAG(c.hot ? "hot" : "spread");
  on_every_rank<T>(c, [&](int rank, const ProcessGroups& groups, const dist::RankGroups&, dist::Dispatcher<T>&,
                          const RankTokens<T>&, const dist::ExpertRows<T>& rows) -> std::string {
    // (source rank, token, probability) of every assignment to each local expert, from the whole domain.
    using Tag = std::tuple<int, int, T>;
    const ExpertRange mine = groups.experts_of(rank, c.experts);
    std::vector<std::multiset<Tag>> want(static_cast<size_t>(mine.count)), got = want;
    for (int src : groups.group(GroupKind::tp_ep, rank)) {
      const RankTokens<T> s = rank_tokens<T>(c, src);
      for (Eigen::Index i = 0; i < s.map.rows(); ++i)
        for (int j = 0; j < mine.count; ++j)
          if (s.map(i, mine.first + j)) want[static_cast<size_t>(j)].insert({src, int(i), s.probs(i, mine.first + j)});
    }
    if (static_cast<int>(rows.group_sizes.size()) != mine.count) return "group_sizes has the wrong length";
    Eigen::Index row = 0;
    for (int j = 0; j < mine.count; ++j)
      for (std::int64_t r = 0; r < rows.group_sizes[static_cast<size_t>(j)]; ++r, ++row) {
        if (row >= rows.x.rows()) return "group_sizes add up to more rows than arrived";
        got[static_cast<size_t>(j)].insert({int(rows.x(row, 0)), int(rows.x(row, 1)), rows.probs(row)});
      }
    if (row != rows.x.rows()) return "rows arrived outside every expert group";
    auto show = [](const std::multiset<Tag>& tags) {
      std::ostringstream os;
      for (const auto& [src, token, prob] : tags) os << " (rank " << src << ", token " << token << ", p " << prob << ")";
      return os.str();
    };
    for (int j = 0; j < mine.count; ++j)
      if (got[static_cast<size_t>(j)] != want[static_cast<size_t>(j)])
        return "expert " + std::to_string(mine.first + j) + " received" + show(got[static_cast<size_t>(j)]) +
               "; its map names" + show(want[static_cast<size_t>(j)]);
    return "";
  });
}

}  // namespace

MOE_PROPERTY(Dispatch, IdentityExpertsCombineToWeightedSum, 150, ()) { identity_experts_combine<double>(*dispatch_cases()); }
MOE_PROPERTY(Dispatch, IdentityExpertsCombineToWeightedSumFloat, 150, ()) { identity_experts_combine<float>(*dispatch_cases()); }
MOE_PROPERTY(Dispatch, ProvenanceTagsArriveWhereTheMapSays, 150, ()) { provenance_tags<double>(*dispatch_cases()); }
MOE_PROPERTY(Dispatch, ProvenanceTagsArriveWhereTheMapSaysFloat, 150, ()) { provenance_tags<float>(*dispatch_cases()); }

}  // namespace moe::proptest
