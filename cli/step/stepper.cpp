#include "cli/step/stepper.hpp"

#include "cli/step/provenance.hpp"
#include "cli/step/stage_catalogue.hpp"
#include "cli/step/stage_recorder.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/layer_shard.hpp"
#include "distributed/train/local_router.hpp"
#include "distributed/train/rank_groups.hpp"
#include "reference/tolerance.hpp"

#include <cmath>
#include <stdexcept>

namespace moe::step {
namespace {

using dist::ExpertRows;

struct WalkResult {
  Matrix<double> y, grad_tokens, grad_probs;
};

// The data pass's experts: this rank's ETP shard of its local experts, as MoeLayerRank runs them.
struct DataExperts {
  const kernels::ExpertShards<double>& shards;
  kernels::SwigluOptions options;
  kernels::ExpertShards<double> grads;
  Matrix<double> pre;

  Matrix<double> forward(const ExpertRows<double>& rows) {
    auto f = kernels::grouped_swiglu_forward(rows.x, rows.group_sizes, shards, rows.probs, options);
    pre = std::move(f.pre);
    return f.y;
  }
  kernels::GroupedSwigluBackward<double> backward(const ExpertRows<double>& rows, const Matrix<double>& d_out) {
    return kernels::grouped_swiglu_backward(rows.x, rows.group_sizes, shards, rows.probs, options, pre, d_out, grads);
  }
};

// The tag pass's experts: each expert row becomes the tag of its (token, expert) assignment, forward and back,
// and its probability gradient keeps naming the expert.
struct TagExperts {
  const TagLayout& tags;

  Matrix<double> forward(const ExpertRows<double>& rows) { return tags.assignment_rows(rows.x, rows.probs); }
  kernels::GroupedSwigluBackward<double> backward(const ExpertRows<double>& rows, const Matrix<double>&) {
    return {tags.assignment_rows(rows.x, rows.probs), rows.probs};
  }
};

// One forward and backward through a fresh dispatcher, every stage reported to `rec`. Both passes run this, so
// they call the dispatcher identically.
template <class Experts>
WalkResult walk(dist::DispatcherKind kind, const dist::DispatchGroups& groups, int num_experts,
                const Matrix<double>& tokens, const Matrix<double>& probs, const BoolMatrix& map,
                const Matrix<double>& grad_y, Experts& experts, StageRecorder& rec) {
  auto dispatcher = dist::make_dispatcher<double>(kind, groups, num_experts);
  dispatcher->set_observer(&rec);
  WalkResult out;

  rec.begin_phase("dispatch");
  const ExpertRows<double> rows = dispatcher->dispatch(tokens, probs, map);
  rec.rows("expert_rows", rows.x);
  rec.rows("expert_rows", rows.probs);
  rec.group(rows.group_sizes);

  rec.begin_phase("experts");
  const Matrix<double> expert_out = experts.forward(rows);
  rec.rows("outputs", expert_out);
  rec.group(rows.group_sizes);

  rec.begin_phase("combine");
  out.y = dispatcher->combine(expert_out);
  rec.rows("output", out.y);

  rec.begin_phase("combine_backward");
  rec.rows("grad_y", grad_y);
  const Matrix<double> d_out = dispatcher->combine_backward(grad_y);
  rec.rows("expert_rows", d_out);
  rec.group(rows.group_sizes);

  rec.begin_phase("experts_backward");
  const auto eb = experts.backward(rows, d_out);
  rec.rows("grad_inputs", eb.dx);
  rec.rows("grad_inputs", eb.dprob);
  rec.group(rows.group_sizes);

  rec.begin_phase("dispatch_backward");
  dispatcher->dispatch_backward(eb.dx, eb.dprob, out.grad_tokens, out.grad_probs);
  rec.rows("grad_tokens", out.grad_tokens);
  rec.rows("grad_tokens", out.grad_probs);
  return out;
}

struct RankResult {
  std::vector<RoutedToken> routing;
  std::vector<Record> data, tags;
  Matrix<double> y, grad_x;
};

std::vector<double> row_of(const Matrix<double>& m, Eigen::Index r) {
  return std::vector<double>(m.row(r).data(), m.row(r).data() + m.cols());
}

RankStage rank_stage(const TagLayout& tags, int rank, const Record& data, const Record& tag, int first_local_expert) {
  const std::string where = data.phase + "." + data.name;
  if (data.phase != tag.phase || data.name != tag.name || data.is_counts != tag.is_counts ||
      data.buffers.size() != tag.buffers.size())
    throw std::logic_error("step: the data and tag passes reported different stages at " + where +
                           " (rule: both run the same dispatcher code on the same routing map)");
  RankStage s;
  s.rank = rank;
  if (data.is_counts) {
    s.counts = data.counts;
    return s;
  }
  const Matrix<double>& x = data.buffers[0];
  if (x.rows() != tag.buffers[0].rows())
    throw std::logic_error("step: the data and tag buffers of " + where + " differ in rows");
  s.width = x.cols();
  const bool has_probs = data.buffers.size() > 1;
  const Matrix<double> none(x.rows(), 0);
  const Matrix<double>& p = has_probs ? data.buffers[1] : none;
  const Matrix<double>& tp = has_probs ? tag.buffers[1] : none;
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    TraceRow row;
    tags.describe(tag.buffers[0].row(r), tp.row(r), row);
    row.values = row_of(x, r);
    if (has_probs) row.probs = row_of(p, r);
    s.rows.push_back(std::move(row));
  }
  for (size_t i = 0; i < data.group_sizes.size(); ++i)
    s.groups.push_back({first_local_expert + static_cast<int>(i), data.group_sizes[i]});
  return s;
}

std::vector<RoutedToken> routed_tokens(const StepProblem& p, const dist::LocalRouting<double>& routing, int first) {
  std::vector<RoutedToken> out;
  for (Eigen::Index t = 0; t < routing.scores.rows(); ++t) {
    const int token = first + static_cast<int>(t);
    RoutedToken rt;
    rt.label = token_name(token) + "@r" + std::to_string(token / p.tokens_per_rank);
    if (p.config.hash_routing) rt.input_id = p.input_ids(token);
    rt.scores = row_of(routing.scores, t);
    for (Eigen::Index j = 0; j < routing.topk.cols(); ++j) {
      const auto e = routing.topk(t, j);
      rt.selected.push_back(static_cast<int>(e));
      rt.weights.push_back(routing.probs(t, e));
    }
    out.push_back(std::move(rt));
  }
  return out;
}

// dL/dy rows carry no probabilities, so their tags name tokens only. The combine backward moves them with the
// dispatch's own indices (same stage names, same row order), so each row takes the experts of the dispatch row
// at its position — after checking that the two rows carry the same tokens.
void inherit_experts(const TagLayout& tags, std::vector<Stage>& stages) {
  for (Stage& back : stages) {
    if (back.phase != "combine_backward" || back.kind != StageKind::rows) continue;
    for (const Stage& fwd : stages) {
      if (fwd.id != "dispatch." + back.name) continue;
      for (size_t r = 0; r < back.ranks.size(); ++r) {
        auto& rows = back.ranks[r].rows;
        const auto& from = fwd.ranks[r].rows;
        if (rows.size() != from.size())
          throw std::logic_error("step: " + back.id + " and " + fwd.id + " differ in rows on rank " + std::to_string(r));
        for (size_t i = 0; i < rows.size(); ++i) {
          if (rows[i].tokens != from[i].tokens)
            throw std::logic_error("step: " + back.id + " row " + std::to_string(i) + " carries other tokens than " +
                                   fwd.id + " (rule: the combine backward reuses the dispatch's row order)");
          rows[i].experts = from[i].experts;
          tags.label(rows[i]);
        }
      }
    }
  }
}

OracleAgreement compare_with_oracle(const StepProblem& p, const Matrix<double>& y, const Matrix<double>& grad_x) {
  MoeInputs<double> in;
  in.seq = p.tokens();
  in.batch = 1;
  in.x = p.x;
  if (p.config.hash_routing) in.input_ids = p.input_ids.transpose();
  for (int r = 0; r < p.layout.world; ++r) {
    in.partition.emplace_back();
    for (int i = 0; i < p.tokens_per_rank; ++i) in.partition.back().push_back(r * p.tokens_per_rank + i);
  }
  const MoeForward<double> fwd = moe_forward(p.config, p.params, in);
  const MoeGradients<double> grads = moe_backward(p.config, p.params, in, fwd, p.grad_y);
  OracleAgreement a;
  a.max_abs_y = (y - fwd.y).cwiseAbs().maxCoeff();
  a.max_abs_grad_x = (grad_x - grads.x).cwiseAbs().maxCoeff();
  a.tolerance = tolerance(Compared::layer, Precision::float64).atol;  // absolute: the values here are O(1)
  return a;
}

}  // namespace

Trace run_step(const StepProblem& p, dist::DispatcherKind kind) {
  const ProcessGroups groups(p.layout);
  const MoeConfig& c = p.config;
  const int n = p.tokens_per_rank, world = p.layout.world;
  const TagLayout tags(p.tokens(), c.num_experts, n);
  std::vector<RankResult> results(static_cast<size_t>(world));

  InprocWorld(world).run([&](Communicator& comm) {
    const int r = comm.rank();
    const dist::RankGroups rank_groups(comm, groups);
    const dist::LayerShard<double> shard = dist::shard_layer(c, p.params, groups, r);
    const Matrix<double> x = p.x.middleRows(Eigen::Index(r) * n, n);
    dist::RouterInputs router_inputs;
    if (c.hash_routing) router_inputs.token_ids = p.input_ids.segment(Eigen::Index(r) * n, n);
    const auto routing = dist::route_local(c, x, shard.router_weight, shard.expert_bias, shard.tid2eid, router_inputs);

    RankResult& out = results[static_cast<size_t>(r)];
    out.routing = routed_tokens(p, routing, r * n);
    StageRecorder data_rec, tag_rec;
    DataExperts data_experts{shard.experts, {c.routed_clamp(), c.apply_probs_on_input, false, c.clamp_limit_passes()}, dist::zeros_like(shard).experts, {}};
    const WalkResult data = walk(kind, rank_groups.dispatch(), c.num_experts, x, routing.probs, routing.routing_map,
                                 p.grad_y.middleRows(Eigen::Index(r) * n, n), data_experts, data_rec);
    TagExperts tag_experts{tags};
    const Matrix<double> token_tags = tags.token_rows(r * n, n);
    walk(kind, rank_groups.dispatch(), c.num_experts, token_tags, TagLayout::expert_probs(routing.routing_map),
         routing.routing_map, token_tags, tag_experts, tag_rec);
    out.data = data_rec.records();
    out.tags = tag_rec.records();
    out.y = data.y;
    // The layer's dL/dx: the routed rows' gradient plus the router's (through the probabilities).
    out.grad_x = data.grad_tokens + dist::route_local_backward(c, routing, data.grad_probs) * shard.router_weight;
  });

  Trace trace;
  trace.example = p.name;
  trace.dispatcher = std::string(dist::to_string(kind));
  trace.notes = p.notes;
  trace.world = world;
  trace.ep = p.layout.ep;
  trace.etp = p.layout.etp;
  trace.num_experts = c.num_experts;
  trace.topk = c.topk;
  trace.hidden = c.hidden;
  trace.tokens_per_rank = n;
  for (int r = 0; r < world; ++r) {
    const ExpertRange range = groups.experts_of(r, c.num_experts);
    trace.rank_experts.emplace_back();
    for (int i = 0; i < range.count; ++i) trace.rank_experts.back().push_back(range.first + i);
  }

  Stage routing = catalogue_stage(kind, "router", "routing", false);
  for (int r = 0; r < world; ++r) {
    RankStage s;
    s.rank = r;
    s.routing = results[static_cast<size_t>(r)].routing;
    routing.ranks.push_back(std::move(s));
  }
  trace.stages.push_back(std::move(routing));

  const auto& first = results[0].data;
  for (int r = 0; r < world; ++r)
    if (results[static_cast<size_t>(r)].data.size() != first.size() ||
        results[static_cast<size_t>(r)].tags.size() != first.size())
      throw std::logic_error("step: rank " + std::to_string(r) + " reported a different number of stages than rank 0");
  for (size_t i = 0; i < first.size(); ++i) {
    Stage stage = catalogue_stage(kind, first[i].phase, first[i].name, first[i].is_counts);
    for (int r = 0; r < world; ++r) {
      const RankResult& rr = results[static_cast<size_t>(r)];
      if (rr.data[i].phase != first[i].phase || rr.data[i].name != first[i].name)
        throw std::logic_error("step: rank " + std::to_string(r) + " reported " + rr.data[i].phase + "." +
                               rr.data[i].name + " where rank 0 reported " + stage.id);
      stage.ranks.push_back(rank_stage(tags, r, rr.data[i], rr.tags[i], groups.experts_of(r, c.num_experts).first));
    }
    trace.stages.push_back(std::move(stage));
  }
  inherit_experts(tags, trace.stages);

  Matrix<double> y(p.tokens(), c.hidden), grad_x(p.tokens(), c.hidden);
  for (int r = 0; r < world; ++r) {
    y.middleRows(Eigen::Index(r) * n, n) = results[static_cast<size_t>(r)].y;
    grad_x.middleRows(Eigen::Index(r) * n, n) = results[static_cast<size_t>(r)].grad_x;
  }
  for (Eigen::Index t = 0; t < y.rows(); ++t) trace.y.push_back(row_of(y, t));
  trace.oracle = compare_with_oracle(p, y, grad_x);
  return trace;
}

}  // namespace moe::step
