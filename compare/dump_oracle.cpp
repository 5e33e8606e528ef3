#include "compare/dump_oracle.hpp"

#include "compare/dump_tensors.hpp"

#include "reference/capacity.hpp"
#include "reference/global_step.hpp"
#include "reference/memory_estimate.hpp"
#include "reference/moe_layer.hpp"
#include "reference/process_groups.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

namespace moe::compare {
namespace {

using Shape = std::vector<std::int64_t>;

// A rank's coordinates in the layout's meshes.
struct Coordinates {
  int tp = 0, dp = 0, ep = 0, etp = 0;
};

Matrix<double> as_matrix(const std::vector<double>& v, Eigen::Index rows, Eigen::Index cols) {
  Matrix<double> m(rows, cols);
  for (Eigen::Index r = 0; r < rows; ++r)
    for (Eigen::Index c = 0; c < cols; ++c) m(r, c) = v[static_cast<size_t>(r * cols + c)];
  return m;
}

std::vector<double> flat(const Matrix<double>& m) {
  std::vector<double> v;
  v.reserve(static_cast<size_t>(m.size()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) v.push_back(m(r, c));
  return v;
}

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
    for (int r = 0; r < dump.layout.world; ++r)
      coords_.push_back({groups_.rank_in(GroupKind::tp, r), groups_.rank_in(GroupKind::dp, r),
                         groups_.rank_in(GroupKind::ep, r), groups_.rank_in(GroupKind::expt_tp, r)});
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

  // Expert e's fc1 name on its rank: SequentialMLP's, or TEGroupedMLP's.
  std::string expert_name(int local, const std::string& which, int rank) const {
    const std::string sequential = "experts.local_experts." + std::to_string(local) + "." + which + ".weight";
    const std::string grouped = "experts." + which + ".weight" + std::to_string(local);
    return d_.ranks[static_cast<size_t>(rank)].has(grouped) && !d_.ranks[static_cast<size_t>(rank)].has(sequential)
               ? grouped
               : sequential;
  }

  MoeParams<double> params() const {
    const MoeConfig& c = d_.config;
    const int h = c.hidden, E = c.num_experts, dd = c.ffn_hidden, etp = d_.layout.etp, tp = d_.layout.tp;
    const int nle = E / d_.layout.ep;
    MoeParams<double> p;
    p.router_weight = as_matrix(replicated("router.weight", {E, h}), E, h);
    if (c.expert_bias) {
      const auto bias = replicated("router.expert_bias", {E});
      p.expert_bias = Eigen::Map<const Vector<double>>(bias.data(), E);
    }
    for (int e = 0; e < E; ++e) {
      Matrix<double> gate(dd, h), up(dd, h), fc2(h, dd);
      for (int j = 0; j < etp; ++j) {  // ETP shard j, on every rank of EP rank e / nle and ETP rank j
        const auto holds = [&](int r) { return at(r).ep == e / nle && at(r).etp == j; };
        const Matrix<double> s1 = as_matrix(
            same_on_every_holder(holds, [&](int r) { return expert_name(e % nle, "linear_fc1", r); },
                                 {2 * dd / etp, h}),
            2 * dd / etp, h);
        gate.middleRows(j * dd / etp, dd / etp) = s1.topRows(dd / etp);
        up.middleRows(j * dd / etp, dd / etp) = s1.bottomRows(dd / etp);
        fc2.middleCols(j * dd / etp, dd / etp) = as_matrix(
            same_on_every_holder(holds, [&](int r) { return expert_name(e % nle, "linear_fc2", r); }, {h, dd / etp}),
            h, dd / etp);
      }
      Matrix<double> fc1(2 * dd, h);
      fc1 << gate, up;
      p.expert_fc1.push_back(fc1);
      p.expert_fc2.push_back(fc2);
    }
    if (c.has_shared_expert()) {
      const int ds = c.shared_expert_ffn_hidden;
      Matrix<double> gate(ds, h), up(ds, h), fc2(h, ds);
      for (int j = 0; j < tp; ++j) {  // TP shard j, on every rank of TP rank j (each replica holds a copy)
        const auto holds = [&](int r) { return at(r).tp == j; };
        const auto shard = [&](const std::string& name, const Shape& shape) {
          return same_on_every_holder(holds, [&](int) { return name; }, shape);
        };
        const Matrix<double> s1 = as_matrix(shard("shared_experts.linear_fc1.weight", {2 * ds / tp, h}), 2 * ds / tp, h);
        gate.middleRows(j * ds / tp, ds / tp) = s1.topRows(ds / tp);
        up.middleRows(j * ds / tp, ds / tp) = s1.bottomRows(ds / tp);
        fc2.middleCols(j * ds / tp, ds / tp) =
            as_matrix(shard("shared_experts.linear_fc2.weight", {h, ds / tp}), h, ds / tp);
      }
      p.shared_fc1.resize(2 * ds, h);
      p.shared_fc1 << gate, up;
      p.shared_fc2 = fc2;
      if (c.shared_expert_gate) p.shared_gate = as_matrix(replicated("shared_experts.gate_weight", {1, h}), 1, h);
    }
    if (c.hash_routing) {  // integers; the oracle's validation refuses ids or experts out of range
      const auto table = replicated("router.tid2eid", {-1, c.topk});
      const Eigen::Index V = static_cast<Eigen::Index>(table.size()) / c.topk;
      p.tid2eid.resize(V, c.topk);
      for (Eigen::Index i = 0; i < p.tid2eid.size(); ++i) p.tid2eid.data()[i] = static_cast<std::int64_t>(table[static_cast<size_t>(i)]);
    }
    return p;
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
};


// What the oracle holds for this dump, estimated from the sizes dump.json gives before any is allocated, with the
// library's estimate (reference/memory_estimate.hpp) and budget: the layer's parameters, each replica's gradients
// and, with tp > 1, each source part's; and each replica's activations.
void check_memory(const Dump& dump) {
  const MoeConfig& c = dump.config;
  const auto saturating = [](std::uint64_t a, std::uint64_t b) {
    return b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b ? std::numeric_limits<std::uint64_t>::max()
                                                                        : a * b;
  };
  const std::uint64_t dp = static_cast<std::uint64_t>(dump.layout.dp());
  const std::uint64_t parts = dump.layout.tp > 1 ? static_cast<std::uint64_t>(dump.layout.tp) : 0;
  const std::uint64_t tokens = static_cast<std::uint64_t>(dump.seq) * static_cast<std::uint64_t>(dump.batch);
  const std::uint64_t params = saturating(layer_param_bytes(c, 1), 2 + dp * (1 + parts));
  const std::uint64_t activations = saturating(layer_activation_bytes(c, tokens), dp);
  const std::uint64_t total =
      params > std::numeric_limits<std::uint64_t>::max() - activations ? std::numeric_limits<std::uint64_t>::max()
                                                                          : params + activations;
  try {
    require_memory(total, "the oracle for this dump");
  } catch (const std::invalid_argument& e) {
    throw DumpError(dump.dir.string() + ": " + e.what());
  }
}

}  // namespace

int oracle_passes(const Dump& dump) {
  const int dp = dump.layout.dp(), tp = dump.layout.tp;
  return dp + (has_backward(dump) ? dp * (1 + (tp > 1 ? tp : 0)) : 0);
}

OracleAnswer oracle_for(const Dump& dump, ExpertPath path, const std::function<void()>& progress) {
  const MoeConfig& c = dump.config;
  if (c.latent_size > 0)
    throw DumpError(dump.dir.string() + ": dumps of latent layers are not compared yet (megatron-core 0.19 has no "
                                        "latent MoE)");
  check_memory(dump);
  const Assembler a(dump);
  const int tp = dump.layout.tp, S = dump.seq, B = dump.batch, E = c.num_experts, h = c.hidden;
  const int dp = dump.layout.dp();
  const std::int64_t local_rows = static_cast<std::int64_t>(S / tp) * B;
  const MoeParams<double> params = a.params();
  const auto partition = source_rank_partition(S, B, 1, tp);
  const bool backward = has_backward(dump);
  const auto tensor3 = [&](const RankDump& r, const std::string& name) { return r.input_values(name, {S / tp, B, h}); };

  // Replica d's rows are parts in tp order, each part's rows in local order; the oracle's rows are s·B + b, so
  // part j's local row l is the oracle's row partition[j][l].
  const auto to_oracle_order = [&](const Matrix<double>& by_part) {
    Matrix<double> out(by_part.rows(), by_part.cols());
    for (int j = 0; j < tp; ++j)
      for (size_t l = 0; l < partition[static_cast<size_t>(j)].size(); ++l)
        out.row(partition[static_cast<size_t>(j)][l]) = by_part.row(j * local_rows + static_cast<Eigen::Index>(l));
    return out;
  };
  const auto part_rows = [&](const Matrix<double>& m, int j) {
    Matrix<double> out(local_rows, m.cols());
    for (size_t l = 0; l < partition[static_cast<size_t>(j)].size(); ++l)
      out.row(static_cast<Eigen::Index>(l)) = m.row(partition[static_cast<size_t>(j)][l]);
    return out;
  };

  std::vector<MoeInputs<double>> inputs(static_cast<size_t>(dp));
  std::vector<Matrix<double>> grad_y(static_cast<size_t>(dp));
  OracleAnswer answer;
  for (int d = 0; d < dp; ++d) {
    MoeInputs<double>& in = inputs[static_cast<size_t>(d)];
    in.seq = S;
    in.batch = B;
    in.x = to_oracle_order(a.replica_rows(d, "hidden_states", h, tensor3));
    in.partition = partition;
    if (dump.replay_capacity) {
      const Matrix<double> map = to_oracle_order(a.replica_rows(
          d, "router.routing_map", E, [&](const RankDump& r, const std::string& n) { return r.values(n, {local_rows, E}); }));
      in.capacity_decision = (map.array() != 0.0).matrix();
    }
    if (c.hash_routing) {  // input_ids [S/tp, B] per rank; the oracle's are [batch, seq], row t = s·B + b
      const Matrix<double> ids = to_oracle_order(a.replica_rows(
          d, "input_ids", 1, [&](const RankDump& r, const std::string& n) { return r.input_values(n, {S / tp, B}); }));
      in.input_ids.resize(B, S);
      for (Eigen::Index t = 0; t < ids.rows(); ++t) in.input_ids(t % B, t / B) = static_cast<std::int64_t>(ids(t, 0));
    }
    if (backward) grad_y[static_cast<size_t>(d)] = to_oracle_order(a.replica_rows(d, "output.grad", h, tensor3));
    if (dump.ranks.front().has("padding_mask")) {  // [S/tp, B], true = padded: the rows' own order
      const Matrix<double> mask = to_oracle_order(a.replica_rows(
          d, "padding_mask", 1, [&](const RankDump& r, const std::string& n) { return r.input_values(n, {S / tp, B}); }));
      for (Eigen::Index t = 0; t < mask.rows(); ++t) in.padding_mask.push_back(mask(t, 0) != 0.0);
    }
  }
  // global_aux: the step's group is every replica (Megatron's tp_dp_cp), its counts the sum of theirs.
  if (c.aux_loss_type == AuxLossType::global_aux) {
    GlobalAuxGroup group;
    group.counts.assign(static_cast<size_t>(E), 0.0);
    for (const auto& in : inputs) {
      const auto counts = moe_forward(c, params, in, path).aux_counts;
      for (int e = 0; e < E; ++e) group.counts[static_cast<size_t>(e)] += static_cast<double>(counts[static_cast<size_t>(e)]);
      group.tokens += static_cast<double>(in.padding_mask.empty() ? in.x.rows()
                                                                  : std::count(in.padding_mask.begin(),
                                                                               in.padding_mask.end(), false));
    }
    for (auto& in : inputs) in.global_aux_group = group;
  }

  std::vector<MoeForward<double>> forwards;
  for (int d = 0; d < dp; ++d) {
    forwards.push_back(moe_forward(c, params, inputs[static_cast<size_t>(d)], path));
    if (progress) progress();
    if (dump.replay_capacity) {  // how far the replayed decisions are from the oracle's own rule
      MoeInputs<double> own = inputs[static_cast<size_t>(d)];
      own.capacity_decision.reset();
      const BoolMatrix mine = moe_forward(c, params, own, path).routing.routing_map;
      answer.replay_differences = std::max(answer.replay_differences, 0) +
                                  static_cast<int>((mine.array() != forwards.back().routing.routing_map.array()).count());
    }
  }

  const auto add = [&](std::string tensor, int rank, Shape shape, std::vector<double> values, bool exact,
                       bool is_backward, std::vector<int> summed = {}) {
    answer.expected.push_back({std::move(tensor), rank, std::move(summed), std::move(shape), std::move(values), exact,
                               is_backward});
  };
  const auto replica_ranks = [&](int d) {
    std::vector<int> ranks;
    for (int j = 0; j < tp; ++j) ranks.push_back(a.find(j, d, -1, -1));
    return ranks;
  };

  // Forward, rank by rank.
  for (int r = 0; r < dump.layout.world; ++r) {
    const auto& f = forwards[static_cast<size_t>(a.at(r).dp)];
    const int j = a.at(r).tp;
    add("router.probs", r, {local_rows, E}, flat(part_rows(f.routing.probs, j)), false, false);
    add("router.routing_map", r, {local_rows, E}, flat(part_rows(f.routing.routing_map.cast<double>(), j)), true, false);
  }
  for (int r = 0; r < dump.layout.world; ++r)
    add("output", r, {S / tp, B, h}, flat(part_rows(forwards[static_cast<size_t>(a.at(r).dp)].y, a.at(r).tp)), false,
        false);
  for (int d = 0; d < dp; ++d) {
    const auto& f = forwards[static_cast<size_t>(d)];
    if (c.aux_loss_type != AuxLossType::none) add("aux_loss", replica_ranks(d)[0], {}, {f.aux_loss}, false, false,
                                                  replica_ranks(d));
    if (c.z_loss_coeff > 0) add("z_loss", replica_ranks(d)[0], {}, {f.z_loss}, false, false, replica_ranks(d));
  }
  if (c.expert_bias)
    for (int r = 0; r < dump.layout.world; ++r) {
      const auto& routing = forwards[static_cast<size_t>(a.at(r).dp)].routing;
      const bool slots = c.semantics.has(Deviation::bias_counts_padded_slots);
      const auto& padded = inputs[static_cast<size_t>(a.at(r).dp)].padding_mask;
      std::vector<double> counts(static_cast<size_t>(E), 0.0);
      for (int t : partition[static_cast<size_t>(a.at(r).tp)])
        for (int e = 0; e < E; ++e)
          counts[static_cast<size_t>(e)] += routing.routing_map(t, e) && (slots || !routing.padded_slot(t, e)) &&
                                            (padded.empty() || !padded[static_cast<size_t>(t)]);
      add("router.local_tokens_per_expert", r, {E}, counts, true, false);
    }
  if (!backward) return answer;

  // Backward: every replica's gradients, and each source rank's part of the expert gradients. With tp = 1 a
  // replica is one source rank and its expert gradients are the part's (the router losses reach only the router).
  std::vector<MoeGradients<double>> grads;
  std::vector<std::vector<MoeGradients<double>>> part_grads(static_cast<size_t>(dp));
  for (int d = 0; d < dp; ++d) {
    const auto& in = inputs[static_cast<size_t>(d)];
    grads.push_back(moe_backward(c, params, in, forwards[static_cast<size_t>(d)], grad_y[static_cast<size_t>(d)], {}, path));
    if (progress) progress();
    for (int j = 0; j < tp && tp > 1; ++j) {  // L restricted to part j's outputs: linear in grad_y, no router losses
      Matrix<double> masked = Matrix<double>::Zero(grad_y[static_cast<size_t>(d)].rows(), h);
      for (int t : partition[static_cast<size_t>(j)]) masked.row(t) = grad_y[static_cast<size_t>(d)].row(t);
      part_grads[static_cast<size_t>(d)].push_back(
          moe_backward(c, params, in, forwards[static_cast<size_t>(d)], masked, LossScales{0.0, 0.0}, path));
      if (progress) progress();
    }
  }
  const auto part = [&](int d, int j) -> const MoeGradients<double>& {
    return tp == 1 ? grads[static_cast<size_t>(d)] : part_grads[static_cast<size_t>(d)][static_cast<size_t>(j)];
  };
  for (int r = 0; r < dump.layout.world; ++r)
    add("hidden_states.grad", r, {S / tp, B, h}, flat(part_rows(grads[static_cast<size_t>(a.at(r).dp)].x, a.at(r).tp)),
        false, true);
  Matrix<double> router = Matrix<double>::Zero(E, h);
  for (const auto& g : grads) router += g.params.router_weight;
  std::vector<int> all(static_cast<size_t>(dump.layout.world));
  std::iota(all.begin(), all.end(), 0);
  add("router.weight.grad", 0, {E, h}, flat(router), false, true, all);

  const int etp = dump.layout.etp, nle = E / dump.layout.ep, dd = c.ffn_hidden;
  for (int r = 0; r < dump.layout.world; ++r) {
    for (int i = 0; i < nle; ++i) {
      const int e = a.at(r).ep * nle + i;
      Matrix<double> fc1 = Matrix<double>::Zero(2 * dd, h), fc2 = Matrix<double>::Zero(h, dd);
      for (int q : a.groups().group(GroupKind::tp_ep, r)) {  // the ranks whose tokens reach r's experts
        const auto& g = part(a.at(q).dp, a.at(q).tp);
        fc1 += g.params.expert_fc1[static_cast<size_t>(e)];
        fc2 += g.params.expert_fc2[static_cast<size_t>(e)];
      }
      add(a.expert_name(i, "linear_fc1", r) + ".grad", r, {2 * dd / etp, h}, flat(glu_shard(fc1, a.at(r).etp, etp)),
          false, true);
      add(a.expert_name(i, "linear_fc2", r) + ".grad", r, {h, dd / etp},
          flat(fc2.middleCols(a.at(r).etp * dd / etp, dd / etp)), false, true);
    }
  }
  if (c.has_shared_expert()) {
    const int ds = c.shared_expert_ffn_hidden;
    for (int r = 0; r < dump.layout.world; ++r) {
      const auto& g = grads[static_cast<size_t>(a.at(r).dp)].params;
      add("shared_experts.linear_fc1.weight.grad", r, {2 * ds / tp, h}, flat(glu_shard(g.shared_fc1, a.at(r).tp, tp)),
          false, true);
      add("shared_experts.linear_fc2.weight.grad", r, {h, ds / tp}, flat(g.shared_fc2.middleCols(a.at(r).tp * ds / tp, ds / tp)),
          false, true);
    }
    if (c.shared_expert_gate)
      for (int d = 0; d < dp; ++d)
        add("shared_experts.gate_weight.grad", replica_ranks(d)[0], {1, h}, flat(grads[static_cast<size_t>(d)].params.shared_gate),
            false, true, replica_ranks(d));
  }
  return answer;
}

}  // namespace moe::compare
