#include "compare/dump_oracle.hpp"

#include "compare/dump_names.hpp"
#include "compare/dump_tensors.hpp"
#include "compare/routing_replay.hpp"

#include "reference/expert_batched.hpp"
#include "reference/global_step.hpp"
#include "reference/memory_estimate.hpp"
#include "reference/moe_layer.hpp"
#include "reference/param_cast.hpp"
#include "reference/process_groups.hpp"
#include "reference/router.hpp"
#include "reference/router_losses.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <utility>

namespace moe::compare {
namespace {

using Shape = std::vector<std::int64_t>;

// A rank's coordinates in the layout's meshes.
struct Coordinates {
  int tp = 0, dp = 0, ep = 0, etp = 0;
};

Matrix<double> as_matrix(const std::vector<double>& v, Eigen::Index rows, Eigen::Index cols) {
  return Eigen::Map<const Matrix<double>>(v.data(), rows, cols);  // row-major, as the .npy files are
}

std::vector<double> flat(const Matrix<double>& m) { return {m.data(), m.data() + m.size()}; }  // row-major

// [gate_j; up_j] of `parts` blocks, from the full [gate; up] (rows) — and back.
Matrix<double> glu_shard(const Matrix<double>& fc1, int j, int parts) {
  const Eigen::Index d = fc1.rows() / 2, block = d / parts;
  Matrix<double> s(2 * block, fc1.cols());
  s << fc1.middleRows(j * block, block), fc1.middleRows(d + j * block, block);
  return s;
}

class Assembler {
 public:
  explicit Assembler(const Dump& dump) : d_(dump), groups_(dump.layout) {
    for (int r = 0; r < dump.layout.world; ++r) {
      coords_.push_back({groups_.rank_in(GroupKind::tp, r), groups_.rank_in(GroupKind::dp, r),
                         groups_.rank_in(GroupKind::ep, r), groups_.rank_in(GroupKind::expt_tp, r)});
      naming_.push_back(expert_naming(dump.ranks[static_cast<size_t>(r)]));
    }
  }

  const Coordinates& at(int rank) const { return coords_[static_cast<size_t>(rank)]; }
  const ProcessGroups& groups() const { return groups_; }

  // The first rank with these coordinates (-1 for "any").
  int find(int tp, int dp, int ep, int etp) const {
    for (int r = 0; r < d_.layout.world; ++r) {
      const Coordinates& c = at(r);
      if ((tp < 0 || c.tp == tp) && (dp < 0 || c.dp == dp) && (ep < 0 || c.ep == ep) && (etp < 0 || c.etp == etp))
        return r;
    }
    throw DumpError("no rank with those coordinates");
  }

  // A parameter (shard) held by every rank `holds` admits, under the name `name_on(r)` there: read once from each
  // holder, every copy compared with the first. A copy that differs would be trained from other weights, whatever
  // the oracle says about the first: the dump is inconsistent.
  template <typename Holds, typename NameOn>
  std::vector<double> same_on_every_holder(Holds holds, NameOn name_on, const Shape& shape) const {
    std::vector<double> first;
    int first_rank = -1;
    for (int r = 0; r < d_.layout.world; ++r) {
      if (!holds(r)) continue;
      const RankDump& rd = d_.ranks[static_cast<size_t>(r)];
      std::vector<double> v = rd.input_values(name_on(r), shape);
      if (first_rank < 0) {
        first = std::move(v);
        first_rank = r;
      } else if (v != first) {
        throw DumpError(rd.dir.string() + ": " + name_on(r) + " differs from rank " + std::to_string(first_rank) +
                        "'s copy (parameters must be the values the step started from, the same on every rank "
                        "that holds them)");
      }
    }
    if (first_rank < 0) throw DumpError("no rank holds " + name_on(0));
    return first;
  }

  // A tensor every rank holds.
  std::vector<double> replicated(const std::string& name, const Shape& shape) const {
    return same_on_every_holder([](int) { return true; }, [&](int) { return name; }, shape);
  }

  // Local expert i's weight on `rank`, under the dump's naming (dump_tensors.hpp).
  std::string expert_name(int local, const std::string& which, int rank) const {
    return expert_weight_name(naming_[static_cast<size_t>(rank)], local, which);
  }

  // Everything but the routed experts, which expert() reads one at a time.
  MoeParams<double> params_without_experts() const {
    const MoeConfig& c = d_.config;
    const int h = c.hidden, E = c.num_experts, tp = d_.layout.tp;
    MoeParams<double> p;
    p.router_weight = as_matrix(replicated(tensor::kRouterWeight, {E, h}), E, h);
    if (c.expert_bias) {
      const auto bias = replicated(tensor::kExpertBias, {E});
      p.expert_bias = Eigen::Map<const Vector<double>>(bias.data(), E);
    }
    if (c.has_shared_expert()) {
      const int ds = c.shared_expert_ffn_hidden;
      Matrix<double> gate(ds, h), up(ds, h), fc2(h, ds);
      for (int j = 0; j < tp; ++j) {  // TP shard j, on every rank of TP rank j (each replica holds a copy)
        const auto holds = [&](int r) { return at(r).tp == j; };
        const auto shard = [&](const std::string& name, const Shape& shape) {
          return same_on_every_holder(holds, [&](int) { return name; }, shape);
        };
        const GluShardShapes shapes = shared_shard_shapes(c, d_.layout);
        const Matrix<double> s1 = as_matrix(shard(tensor::kSharedFc1, shapes.fc1), 2 * ds / tp, h);
        gate.middleRows(j * ds / tp, ds / tp) = s1.topRows(ds / tp);
        up.middleRows(j * ds / tp, ds / tp) = s1.bottomRows(ds / tp);
        fc2.middleCols(j * ds / tp, ds / tp) = as_matrix(shard(tensor::kSharedFc2, shapes.fc2), h, ds / tp);
      }
      p.shared_fc1.resize(2 * ds, h);
      p.shared_fc1 << gate, up;
      p.shared_fc2 = fc2;
      if (c.shared_expert_gate) p.shared_gate = as_matrix(replicated(tensor::kSharedGate, {1, h}), 1, h);
    }
    if (c.hash_routing) {  // integers; the oracle's validation refuses ids or experts out of range
      const auto table = replicated(tensor::kTid2Eid, {-1, c.topk});
      const Eigen::Index V = static_cast<Eigen::Index>(table.size()) / c.topk;
      p.tid2eid.resize(V, c.topk);
      for (Eigen::Index i = 0; i < p.tid2eid.size(); ++i) p.tid2eid.data()[i] = static_cast<std::int64_t>(table[static_cast<size_t>(i)]);
    }
    return p;
  }

  // Routed expert e's whole weights from its ETP shards, read from every rank that holds them (fc1 [2d, h] =
  // [gate; up], fc2 [h, d]).
  std::pair<Matrix<double>, Matrix<double>> expert(int e) const {
    const MoeConfig& c = d_.config;
    const int h = c.hidden, dd = c.ffn_hidden, etp = d_.layout.etp, nle = c.num_experts / d_.layout.ep;
    Matrix<double> fc1(2 * dd, h), fc2(h, dd);
    const GluShardShapes shapes = expert_shard_shapes(c, d_.layout);
    for (int j = 0; j < etp; ++j) {  // ETP shard j, on every rank of EP rank e / nle and ETP rank j
      const auto holds = [&](int r) { return at(r).ep == e / nle && at(r).etp == j; };
      const Matrix<double> s1 = as_matrix(
          same_on_every_holder(holds, [&](int r) { return expert_name(e % nle, "linear_fc1", r); }, shapes.fc1),
          2 * dd / etp, h);
      fc1.middleRows(j * dd / etp, dd / etp) = s1.topRows(dd / etp);
      fc1.middleRows(dd + j * dd / etp, dd / etp) = s1.bottomRows(dd / etp);
      fc2.middleCols(j * dd / etp, dd / etp) = as_matrix(
          same_on_every_holder(holds, [&](int r) { return expert_name(e % nle, "linear_fc2", r); }, shapes.fc2),
          h, dd / etp);
    }
    return {std::move(fc1), std::move(fc2)};
  }

  // Replica d's rows [S·B, ·] from its tp ranks' [S/tp, B, ·] tensors (or [S/tp·B, ·]: `flat_rows`).
  template <typename Pick>
  Matrix<double> replica_rows(int dp, const std::string& name, Eigen::Index cols, Pick rank_values) const {
    const int tp = d_.layout.tp;
    const Eigen::Index local = static_cast<Eigen::Index>(d_.seq / tp) * d_.batch;
    Matrix<double> out(local * tp, cols);
    for (int j = 0; j < tp; ++j) {
      const std::vector<double> v = rank_values(d_.ranks[static_cast<size_t>(find(j, dp, -1, -1))], name);
      out.middleRows(j * local, local) = as_matrix(v, local, cols);
    }
    return out;
  }

 private:
  const Dump& d_;
  ProcessGroups groups_;
  std::vector<Coordinates> coords_;
  std::vector<ExpertNaming> naming_;  // per rank, read off its files once
};


std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  return b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b ? std::numeric_limits<std::uint64_t>::max()
                                                                      : a * b;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a > std::numeric_limits<std::uint64_t>::max() - b ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

template <typename T>
std::vector<double> flat_of(const Matrix<T>& m) { return {m.data(), m.data() + m.size()}; }  // row-major, widened

template <typename T>
MoeInputs<T> cast_inputs(const MoeInputs<double>& in) {
  MoeInputs<T> out;
  out.seq = in.seq;
  out.batch = in.batch;
  out.x = in.x.cast<T>();
  out.input_ids = in.input_ids;
  out.padding_mask = in.padding_mask;
  out.partition = in.partition;
  out.capacity_decision = in.capacity_decision;
  out.selection = in.selection;
  out.global_aux = in.global_aux;
  out.global_aux_group = in.global_aux_group;
  return out;
}

// One data-parallel replica's layer call under one oracle, while its experts stream by.
template <typename T>
struct ReplicaCall {
  Routing<T> routing;
  Matrix<T> u, grad_z;        // the experts' inputs and dL/d(their summed outputs)
  Matrix<T> z;                // Σ of the experts' outputs, expert by expert in rising e
  RoutedBackward<T> routed;   // dL/du and dL/dprobs (z stays empty: latent layers are refused)
};

// One oracle: the double one, or the rounding one in the dump's arithmetic (float sums, bf16 storage, a bf16
// router), each with its parameters, inputs and calls in its scalar.
template <typename T>
struct Model {
  MoeConfig config;
  MoeParams<T> params;                       // without the routed experts
  std::vector<MoeInputs<T>> inputs;          // per replica
  std::vector<Matrix<T>> grad_y;             // per replica
  std::vector<ReplicaCall<T>> calls;         // per replica
  std::vector<std::vector<Matrix<T>>> grad;  // the visited expert's [group] gradient: fc1, then fc2
  std::vector<std::int64_t> rows;            // the visited expert's rows per group
};

// The streamed oracle of one dump: route every replica (replaying the dump's selection where it differs only
// within the router's rounding), visit each expert once (its weights read from the dump, its rows from every replica
// stacked, forward and backward under each oracle), then finish every replica's call.
class StreamedOracle {
 public:
  StreamedOracle(const Dump& dump, const OracleOptions& options, const ExpectedSink& sink)
      : d_(dump), o_(options), sink_(sink), a_(dump), tp_(dump.layout.tp), dp_(dump.layout.dp()),
        local_rows_(static_cast<std::int64_t>(dump.seq / dump.layout.tp) * dump.batch),
        partition_(source_rank_partition(dump.seq, dump.batch, 1, dump.layout.tp)), backward_(has_backward(dump)) {
    exact_.config = dump.config;
    if (o_.rounding_too) {
      rounding_.emplace();
      rounding_->config = dump.config;
      rounding_->config.bf16_storage = dump.precision == Precision::bfloat16;
      rounding_->config.bf16_router = dump.router_precision == Precision::bfloat16;
    }
    // The tp_ep group of each rank, numbered by first member: an expert's gradient on rank r sums the rows of the
    // source ranks in r's group.
    std::vector<int> first_member;
    for (int r = 0; r < dump.layout.world; ++r) {
      const int first = a_.groups().group(GroupKind::tp_ep, r).front();
      const auto it = std::find(first_member.begin(), first_member.end(), first);
      group_of_rank_.push_back(static_cast<int>(it - first_member.begin()));
      if (it == first_member.end()) first_member.push_back(first);
    }
    groups_ = static_cast<int>(first_member.size());
  }

  OracleRun run() {
    exact_.params = a_.params_without_experts();
    read_inputs();
    route_replicas();
    for (int e = 0; e < d_.config.num_experts; ++e) {
      visit_expert(e);
      if (o_.progress) o_.progress();
    }
    finish();
    if (o_.progress) o_.progress();
    return run_;
  }

 private:
  using Shape = std::vector<std::int64_t>;

  // Replica d's rows are parts in tp order, each part's rows in local order; the oracle's rows are s·B + b, so
  // part j's local row l is the oracle's row partition[j][l].
  Matrix<double> to_oracle_order(const Matrix<double>& by_part) const {
    Matrix<double> out(by_part.rows(), by_part.cols());
    for (int j = 0; j < tp_; ++j)
      for (size_t l = 0; l < part(j).size(); ++l)
        out.row(part(j)[l]) = by_part.row(j * local_rows_ + static_cast<Eigen::Index>(l));
    return out;
  }
  template <typename M>
  Matrix<double> part_rows(const M& m, int j) const {
    Matrix<double> out(local_rows_, m.cols());
    for (size_t l = 0; l < part(j).size(); ++l)
      out.row(static_cast<Eigen::Index>(l)) = m.row(part(j)[l]).template cast<double>();
    return out;
  }
  const std::vector<int>& part(int j) const { return partition_[static_cast<size_t>(j)]; }

  // Replica d's oracle row t: the rank that holds it and its local row there.
  std::pair<int, std::int64_t> holder(int d, int t) const {
    for (int j = 0; j < tp_; ++j) {
      const auto& p = part(j);
      const auto it = std::find(p.begin(), p.end(), t);
      if (it != p.end()) return {a_.find(j, d, -1, -1), static_cast<std::int64_t>(it - p.begin())};
    }
    return {-1, -1};
  }

  void read_inputs() {
    const MoeConfig& c = d_.config;
    const int S = d_.seq, B = d_.batch, h = c.hidden, E = c.num_experts;
    const auto tensor3 = [&](const RankDump& r, const std::string& n) { return r.input_values(n, {S / tp_, B, h}); };
    const auto per_row = [&](const RankDump& r, const std::string& n) { return r.input_values(n, {S / tp_, B}); };
    exact_.inputs.resize(static_cast<size_t>(dp_));
    exact_.grad_y.resize(static_cast<size_t>(dp_));
    row_group_.resize(static_cast<size_t>(dp_));
    for (int d = 0; d < dp_; ++d) {
      MoeInputs<double>& in = exact_.inputs[static_cast<size_t>(d)];
      in.seq = S;
      in.batch = B;
      in.x = to_oracle_order(a_.replica_rows(d, tensor::kHiddenStates, h, tensor3));
      in.partition = partition_;
      if (d_.replay_capacity) {
        const auto flat_rows = [&](const RankDump& r, const std::string& n) { return r.values(n, {local_rows_, E}); };
        const Matrix<double> map = to_oracle_order(a_.replica_rows(d, tensor::kRoutingMap, E, flat_rows));
        in.capacity_decision = (map.array() != 0.0).matrix();
      }
      if (c.hash_routing) {  // input_ids [S/tp, B] per rank; the oracle's are [batch, seq], row t = s·B + b
        const Matrix<double> ids = to_oracle_order(a_.replica_rows(d, "input_ids", 1, per_row));
        in.input_ids.resize(B, S);
        for (Eigen::Index t = 0; t < ids.rows(); ++t) in.input_ids(t % B, t / B) = static_cast<std::int64_t>(ids(t, 0));
      }
      if (backward_)
        exact_.grad_y[static_cast<size_t>(d)] = to_oracle_order(a_.replica_rows(d, tensor::kOutputGrad, h, tensor3));
      if (d_.ranks.front().has(tensor::kPaddingMask)) {  // [S/tp, B], true = padded: the rows' own order
        const Matrix<double> mask = to_oracle_order(a_.replica_rows(d, tensor::kPaddingMask, 1, per_row));
        for (Eigen::Index t = 0; t < mask.rows(); ++t) in.padding_mask.push_back(mask(t, 0) != 0.0);
      }
      // Each row's expert-gradient group: that of the rank that holds it (part j of replica d).
      auto& groups = row_group_[static_cast<size_t>(d)];
      groups.assign(static_cast<size_t>(in.x.rows()), 0);
      for (int j = 0; j < tp_; ++j)
        for (int t : part(j))
          groups[static_cast<size_t>(t)] = group_of_rank_[static_cast<size_t>(a_.find(j, d, -1, -1))];
    }
  }

  // Whether the dump's selection can be replayed: a score-routed layer without capacity (after dropping, a map row
  // no longer says which k experts were selected) whose every rank holds its routing map.
  bool selection_replayable() const {
    if (d_.config.hash_routing || d_.config.capacity_factor) return false;
    return std::all_of(d_.ranks.begin(), d_.ranks.end(), [](const RankDump& r) { return r.has(tensor::kRoutingMap); });
  }

  // Replica d's selection as the oracle takes it: its own top-k, except rows where the dump selected other experts
  // that are a top-k within the router's rounding (routing_replay.hpp), which take the dump's, ranked by the
  // oracle's ranking scores. Rows beyond the rounding keep the oracle's own selection and are reported.
  void replay_selection(int d) {
    const MoeConfig& c = d_.config;
    MoeInputs<double>& in = exact_.inputs[static_cast<size_t>(d)];
    const Routing<double> own = route(c, exact_.params, in);
    const int E = c.num_experts, k = c.topk;
    const auto flat_rows = [&](const RankDump& r, const std::string& n) { return r.values(n, {local_rows_, E}); };
    const Matrix<double> map = to_oracle_order(a_.replica_rows(d, tensor::kRoutingMap, E, flat_rows));
    IndexMatrix selection = own.selected;
    bool replayed = false;
    for (Eigen::Index t = 0; t < map.rows(); ++t) {
      ++run_.replay.rows;
      std::vector<int> chosen;
      for (int e = 0; e < E; ++e)
        if (map(t, e) != 0.0) chosen.push_back(e);
      if (static_cast<int>(chosen.size()) != k) continue;  // not a selection: the map's comparison fails
      bool same = true;
      for (int e : chosen) same = same && own.routing_map(t, e);
      if (same) continue;
      const RowVector<double> ranking = ranking_scores<double>(c, own.logits.row(t), own.scores.row(t),
                                                               exact_.params.expert_bias);
      const RowVector<double> bound =
          ranking_error_bound(c, in.x.row(t), exact_.params.router_weight, own.logits.row(t), own.scores.row(t),
                              exact_.params.expert_bias, d_.router_precision);
      const FlipJudgement j = judge_flip(c, ranking, bound, chosen);
      const auto [rank, local] = holder(d, static_cast<int>(t));
      if (!j.within_rounding) {
        run_.replay.beyond_rounding.push_back({rank, local, j.margin, j.bound});
        continue;
      }
      std::sort(chosen.begin(), chosen.end(), [&](int p, int q) { return ranking(p) > ranking(q) || (ranking(p) == ranking(q) && p < q); });
      for (int i = 0; i < k; ++i) selection(t, i) = chosen[static_cast<size_t>(i)];
      replayed = true;
      ++run_.replay.replayed;
      if (j.margin > run_.replay.largest_margin) {
        run_.replay.largest_margin = j.margin;
        run_.replay.its_bound = j.bound;
      }
    }
    if (replayed) in.selection = std::move(selection);
  }

  void route_replicas() {
    const MoeConfig& c = d_.config;
    for (const auto& in : exact_.inputs) validate_layer_inputs(c, exact_.params, in, RoutedWeights::streamed);
    run_.replay.possible = selection_replayable();
    if (run_.replay.possible)
      for (int d = 0; d < dp_; ++d) replay_selection(d);
    // global_aux: the step's group is every replica (Megatron's tp_dp_cp), its counts the sum of theirs, plus the
    // rows outside the dump its framework pooled with them (aux_pool).
    if (c.aux_loss_type == AuxLossType::global_aux) {
      GlobalAuxGroup group = d_.aux_pool.value_or(GlobalAuxGroup{});
      group.counts.resize(static_cast<size_t>(c.num_experts), 0.0);
      for (const auto& in : exact_.inputs) {
        const auto counts = aux_loss(c, route(c, exact_.params, in), in).counts;
        for (size_t e = 0; e < counts.size(); ++e) group.counts[e] += static_cast<double>(counts[e]);
        group.tokens += static_cast<double>(in.padding_mask.empty() ? in.x.rows()
                                                                    : std::count(in.padding_mask.begin(),
                                                                                 in.padding_mask.end(), false));
      }
      for (auto& in : exact_.inputs) in.global_aux_group = group;
    }
    start_calls(exact_);
    if (rounding_) {
      // The same decisions as the double oracle's: its selection and its capacity decisions replayed, so that d is
      // what rounding does to the values, never a decision the rounding flipped.
      rounding_->params = cast_params<float>(exact_.params);
      for (int d = 0; d < dp_; ++d) {
        MoeInputs<double> in = exact_.inputs[static_cast<size_t>(d)];
        const Routing<double>& taken = exact_.calls[static_cast<size_t>(d)].routing;
        if (!c.hash_routing) in.selection = taken.selected;
        if (c.capacity_factor) in.capacity_decision = taken.routing_map;
        rounding_->inputs.push_back(cast_inputs<float>(in));
        rounding_->grad_y.push_back(backward_ ? exact_.grad_y[static_cast<size_t>(d)].cast<float>() : Matrix<float>());
      }
      start_calls(*rounding_);
    }
    if (d_.replay_capacity) {  // how far the replayed decisions are from the oracle's own rule
      run_.replay_differences = 0;
      for (int d = 0; d < dp_; ++d) {
        MoeInputs<double> own = exact_.inputs[static_cast<size_t>(d)];
        own.capacity_decision.reset();
        const BoolMatrix mine = route(c, exact_.params, own).routing_map;
        run_.replay_differences +=
            static_cast<int>((mine.array() != exact_.calls[static_cast<size_t>(d)].routing.routing_map.array()).count());
      }
    }
  }

  template <typename T>
  void start_calls(Model<T>& m) {
    m.calls.assign(static_cast<size_t>(dp_), ReplicaCall<T>{});
    for (int d = 0; d < dp_; ++d) {
      const MoeInputs<T>& in = m.inputs[static_cast<size_t>(d)];
      ReplicaCall<T>& call = m.calls[static_cast<size_t>(d)];
      call.routing = route(m.config, m.params, in);
      call.u = routed_inputs(m.config, m.params, in.x);
      call.z = Matrix<T>::Zero(in.x.rows(), call.u.cols());
      if (!backward_) continue;
      call.grad_z = routed_output_grad(m.config, m.params, m.grad_y[static_cast<size_t>(d)]);
      call.routed.grad_u = Matrix<T>::Zero(in.x.rows(), call.u.cols());
      call.routed.grad_probs = Matrix<T>::Zero(in.x.rows(), m.config.num_experts);
    }
  }

  // Expert e under one oracle: its rows of every replica in gradient group g stacked (replica, then row order),
  // forward and backward in one visit, the outputs scattered back; its gradient per group left in m.grad.
  template <typename T>
  void visit_expert_in(Model<T>& m, int e, const Matrix<T>& fc1, const Matrix<T>& fc2) {
    m.grad.assign(2, {});
    m.rows.assign(static_cast<size_t>(groups_), 0);
    for (int g = 0; g < groups_; ++g) {
      std::vector<std::pair<int, Eigen::Index>> rows;  // (replica, row)
      for (int d = 0; d < dp_; ++d) {
        const auto& map = m.calls[static_cast<size_t>(d)].routing.routing_map;
        for (Eigen::Index t = 0; t < map.rows(); ++t)
          if (map(t, e) && row_group_[static_cast<size_t>(d)][static_cast<size_t>(t)] == g) rows.emplace_back(d, t);
      }
      const auto n = static_cast<Eigen::Index>(rows.size());
      m.rows[static_cast<size_t>(g)] = n;
      Matrix<T> u(n, fc1.cols()), grad_out(backward_ ? n : 0, fc1.cols());
      Vector<T> probs(n);
      for (Eigen::Index i = 0; i < n; ++i) {
        const ReplicaCall<T>& call = m.calls[static_cast<size_t>(rows[static_cast<size_t>(i)].first)];
        const Eigen::Index t = rows[static_cast<size_t>(i)].second;
        u.row(i) = call.u.row(t);
        probs(i) = call.routing.probs(t, e);
        if (backward_) grad_out.row(i) = call.grad_z.row(t);
      }
      const auto call_of = [&](Eigen::Index i) -> ReplicaCall<T>& {
        return m.calls[static_cast<size_t>(rows[static_cast<size_t>(i)].first)];
      };
      if (!backward_) {
        const Matrix<T> out = n == 0 ? Matrix<T>() : routed_expert_forward(m.config, fc1, fc2, u, probs, o_.path);
        for (Eigen::Index i = 0; i < n; ++i) call_of(i).z.row(rows[static_cast<size_t>(i)].second) += out.row(i);
        continue;
      }
      m.grad[0].push_back(Matrix<T>::Zero(fc1.rows(), fc1.cols()));
      m.grad[1].push_back(Matrix<T>::Zero(fc2.rows(), fc2.cols()));
      if (n == 0) continue;
      const auto b = routed_expert_backward(m.config, fc1, fc2, u, probs, grad_out, m.grad[0].back(), m.grad[1].back(),
                                            true, o_.path);
      for (Eigen::Index i = 0; i < n; ++i) {
        ReplicaCall<T>& call = call_of(i);
        const Eigen::Index t = rows[static_cast<size_t>(i)].second;
        call.z.row(t) += b.output.row(i);
        call.routed.grad_u.row(t) += b.grad_input.row(i);
        call.routed.grad_probs(t, e) = b.grad_prob(i);
      }
    }
  }

  // Expert e under every oracle, then its gradient shards handed to the sink, rank by rank.
  void visit_expert(int e) {
    const auto [fc1, fc2] = a_.expert(e);
    visit_expert_in(exact_, e, fc1, fc2);
    if (rounding_) visit_expert_in(*rounding_, e, Matrix<float>(fc1.cast<float>()), Matrix<float>(fc2.cast<float>()));
    if (!backward_) return;
    const int etp = d_.layout.etp, nle = d_.config.num_experts / d_.layout.ep, dd = d_.config.ffn_hidden;
    const GluShardShapes shapes = expert_shard_shapes(d_.config, d_.layout);
    for (int r = 0; r < d_.layout.world; ++r) {
      if (a_.at(r).ep != e / nle) continue;
      const auto g = static_cast<size_t>(group_of_rank_[static_cast<size_t>(r)]);
      const int j = a_.at(r).etp;
      const auto shards = [&](const auto& m) {
        const auto& g1 = m.grad[0][g];
        const auto& g2 = m.grad[1][g];
        if (etp == 1) return std::pair{flat_of(g1), flat_of(g2)};
        return std::pair{flat(glu_shard(g1.template cast<double>(), j, etp)),
                         flat(Matrix<double>(g2.middleCols(j * dd / etp, dd / etp).template cast<double>()))};
      };
      auto exact = shards(exact_);
      std::optional<std::pair<std::vector<double>, std::vector<double>>> rounded;
      if (rounding_) rounded = shards(*rounding_);
      const std::int64_t n = exact_.rows[g];
      give(a_.expert_name(e % nle, "linear_fc1", r) + ".grad", r, shapes.fc1, std::move(exact.first),
           rounded ? &rounded->first : nullptr, false, true, n);
      give(a_.expert_name(e % nle, "linear_fc2", r) + ".grad", r, shapes.fc2, std::move(exact.second),
           rounded ? &rounded->second : nullptr, false, true, n);
    }
  }

  // Hands one expected tensor (and the rounding oracle's, when run) to the sink.
  void give(std::string tensor, int rank, Shape shape, std::vector<double> values, std::vector<double>* rounded,
            bool exact, bool is_backward, std::int64_t rows, std::vector<int> summed = {}) {
    Expected e{std::move(tensor), rank, std::move(summed), std::move(shape), std::move(values), exact, is_backward,
               rows};
    if (!rounded) return sink_(e, nullptr);
    const Expected s{e.tensor, rank, e.summed_ranks, e.shape, std::move(*rounded), exact, is_backward, rows};
    sink_(e, &s);
  }

  // Replica d's call after its experts under one oracle; its call's rows freed.
  template <typename T>
  std::pair<MoeForward<T>, MoeGradients<T>> finish_replica(Model<T>& m, int d) {
    ReplicaCall<T>& call = m.calls[static_cast<size_t>(d)];
    const MoeInputs<T>& in = m.inputs[static_cast<size_t>(d)];
    MoeForward<T> f = finish_forward(m.config, m.params, in, call.routing, call.z, o_.path);
    MoeGradients<T> g;
    if (backward_)
      g = finish_backward(m.config, m.params, in, f, m.grad_y[static_cast<size_t>(d)], LossScales{}, call.routed, o_.path);
    call = ReplicaCall<T>{};
    return {std::move(f), std::move(g)};
  }

  // Every replica's call after its experts, one replica at a time (its gradients are dropped once handed over),
  // under each oracle; the router's gradient summed over all of them.
  void finish() {
    const MoeConfig& c = d_.config;
    const int E = c.num_experts, h = c.hidden, S = d_.seq, B = d_.batch;
    Matrix<double> router = Matrix<double>::Zero(E, h);
    Matrix<float> router_rounded = Matrix<float>::Zero(rounding_ ? E : 0, rounding_ ? h : 0);
    for (int d = 0; d < dp_; ++d) {
      const MoeInputs<double>& in = exact_.inputs[static_cast<size_t>(d)];
      const auto finished = finish_replica(exact_, d);
      const MoeForward<double>& f = finished.first;
      const MoeGradients<double>& g = finished.second;
      std::optional<std::pair<MoeForward<float>, MoeGradients<float>>> fr;
      if (rounding_) fr = finish_replica(*rounding_, d);
      if (backward_) {
        router += g.params.router_weight;
        if (fr) router_rounded += fr->second.params.router_weight;
      }
      // Each oracle's tensor for rank r (`of` takes the forward and the gradients of one oracle), and the sink's call
      // with both.
      // Rank-local tensors are made of the rank's rows, the replica's sums of all of its rows.
      const auto each = [&](const std::string& tensor, int rank, const Shape& shape, bool exact, bool is_backward,
                            const auto& of, std::vector<int> summed = {}) {
        std::vector<double> rounded;
        if (fr) rounded = of(fr->first, fr->second);
        const std::int64_t rows = summed.empty() && !tensor.starts_with("shared_experts.") ? local_rows_
                                                                                            : local_rows_ * tp_;
        give(tensor, rank, shape, of(f, g), fr ? &rounded : nullptr, exact, is_backward, rows, std::move(summed));
      };
      std::vector<int> replica;
      for (int j = 0; j < tp_; ++j) replica.push_back(a_.find(j, d, -1, -1));
      for (int j = 0; j < tp_; ++j) {
        const int r = replica[static_cast<size_t>(j)];
        each(tensor::kProbs, r, {local_rows_, E}, false, false,
             [&](const auto& fw, const auto&) { return flat(part_rows(fw.routing.probs, j)); });
        each(tensor::kRoutingMap, r, {local_rows_, E}, true, false,
             [&](const auto& fw, const auto&) { return flat(part_rows(fw.routing.routing_map.template cast<double>(), j)); });
        each(tensor::kOutput, r, {S / tp_, B, h}, false, false,
             [&](const auto& fw, const auto&) { return flat(part_rows(fw.y, j)); });
      }
      if (c.aux_loss_type != AuxLossType::none)
        each("aux_loss", replica[0], {}, false, false,
             [&](const auto& fw, const auto&) { return std::vector<double>{static_cast<double>(fw.aux_loss)}; }, replica);
      if (c.z_loss_coeff > 0)
        each("z_loss", replica[0], {}, false, false,
             [&](const auto& fw, const auto&) { return std::vector<double>{static_cast<double>(fw.z_loss)}; }, replica);
      if (c.expert_bias)
        for (int j = 0; j < tp_; ++j)
          each(tensor::kLocalTokensPerExpert, replica[static_cast<size_t>(j)], {E}, true, false,
               [&](const auto& fw, const auto&) { return bias_counts(fw.routing.routing_map, fw.routing.padded_slot,
                                                                     in.padding_mask, j); });
      if (!backward_) continue;
      for (int j = 0; j < tp_; ++j)
        each(tensor::kHiddenStatesGrad, replica[static_cast<size_t>(j)], {S / tp_, B, h}, false, true,
             [&](const auto&, const auto& gr) { return flat(part_rows(gr.x, j)); });
      if (c.has_shared_expert()) {
        const int ds = c.shared_expert_ffn_hidden;
        const GluShardShapes shapes = shared_shard_shapes(c, d_.layout);
        for (int j = 0; j < tp_; ++j) {
          const int r = replica[static_cast<size_t>(j)];
          each(tensor::kSharedFc1Grad, r, shapes.fc1, false, true,
               [&](const auto&, const auto& gr) {
                 return flat(glu_shard(gr.params.shared_fc1.template cast<double>(), j, tp_));
               });
          each(tensor::kSharedFc2Grad, r, shapes.fc2, false, true, [&](const auto&, const auto& gr) {
            return flat(Matrix<double>(gr.params.shared_fc2.middleCols(j * ds / tp_, ds / tp_).template cast<double>()));
          });
        }
        if (c.shared_expert_gate)
          each(tensor::kSharedGateGrad, replica[0], {1, h}, false, true,
               [&](const auto&, const auto& gr) { return flat_of(gr.params.shared_gate); }, replica);
      }
    }
    if (!backward_) return;
    std::vector<int> all(static_cast<size_t>(d_.layout.world));
    std::iota(all.begin(), all.end(), 0);
    std::vector<double> rounded;
    if (rounding_) rounded = flat_of(router_rounded);
    give(tensor::kRouterWeightGrad, 0, {E, h}, flat(router), rounding_ ? &rounded : nullptr, false, true,
         local_rows_ * tp_ * dp_, all);
  }

  // Rank j's expert-bias counts: its rows' real assignments after dropping, padded tokens excluded.
  std::vector<double> bias_counts(const BoolMatrix& map, const BoolMatrix& padded_slot, const std::vector<bool>& padded,
                                  int j) const {
    const int E = d_.config.num_experts;
    const bool slots = d_.config.semantics.has(Deviation::bias_counts_padded_slots);
    std::vector<double> counts(static_cast<size_t>(E), 0.0);
    for (int t : part(j))
      for (int e = 0; e < E; ++e)
        counts[static_cast<size_t>(e)] += map(t, e) && (slots || !padded_slot(t, e)) &&
                                          (padded.empty() || !padded[static_cast<size_t>(t)]);
    return counts;
  }

  const Dump& d_;
  const OracleOptions& o_;
  const ExpectedSink& sink_;
  const Assembler a_;
  const int tp_, dp_;
  const std::int64_t local_rows_;
  const std::vector<std::vector<int>> partition_;
  const bool backward_;
  Model<double> exact_;                                 // the double oracle
  std::optional<Model<float>> rounding_;                // the rounding oracle, when run
  std::vector<int> group_of_rank_;                      // tp_ep group of each rank
  int groups_ = 0;
  std::vector<std::vector<int>> row_group_;             // per replica and row: its expert-gradient group
  OracleRun run_;
};

}  // namespace

std::uint64_t oracle_memory_bytes(const Dump& dump, bool rounding_too) {
  const MoeConfig& c = dump.config;
  const auto n = [](std::int64_t v) { return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0)); };
  const std::uint64_t models = rounding_too ? 2 : 1, tokens = saturating_mul(n(dump.seq) * n(dump.batch),
                                                                                 n(dump.layout.dp()));
  const std::uint64_t h = n(c.hidden), E = n(c.num_experts), w = n(c.expert_width()), d = n(c.ffn_hidden);
  const std::uint64_t expert = saturating_mul(8, saturating_mul(3, saturating_mul(d, w)));
  const std::uint64_t all_params = layer_param_bytes(c, 1);
  const std::uint64_t routed = saturating_mul(E, expert);
  const std::uint64_t others = all_params > routed ? all_params - routed : 0;
  const std::uint64_t groups = n(dump.layout.world);  // at most one tp_ep group per rank
  std::uint64_t total = saturating_mul(others, 1 + 2 * models);           // parameters, a replica's gradients
  total = saturating_add(total, saturating_mul(tokens, saturating_mul(2 * h, 8)));  // x and dL/dy
  // Per oracle and token: u, dL/dz, z, dL/du, y or dL/dx; logits, scores, probs, map, masks, dL/dprobs.
  total = saturating_add(total, saturating_mul(models, saturating_mul(tokens, saturating_mul(5 * w + 6 * E, 8))));
  // One expert: its weights, its gradient per group and oracle, its stacked rows (at most every token) with
  // their [2d] intermediates.
  total = saturating_add(total, saturating_mul(expert, 1 + models * std::min<std::uint64_t>(groups, 64)));
  total = saturating_add(total, saturating_mul(tokens, saturating_mul(4 * w + 8 * d, 8)));
  // A replica's shared expert, finished one at a time.
  return saturating_add(total, layer_activation_bytes(c, saturating_mul(n(dump.seq), n(dump.batch))));
}

int oracle_steps(const Dump& dump) { return dump.config.num_experts + 1; }

OracleRun run_oracle(const Dump& dump, const OracleOptions& options, const ExpectedSink& sink) {
  if (dump.config.latent_size > 0)
    throw DumpError(dump.dir.string() + ": dumps of latent layers are not compared yet (megatron-core 0.19 has no "
                                        "latent MoE)");
  try {
    require_memory(oracle_memory_bytes(dump, options.rounding_too), "the oracle for this dump");
  } catch (const std::invalid_argument& e) {
    throw DumpError(dump.dir.string() + ": " + e.what());
  }
  return StreamedOracle(dump, options, sink).run();
}

}  // namespace moe::compare
