#include "cli/step/wave_walk.hpp"

#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/layer_shard.hpp"
#include "distributed/train/moe_layer_rank.hpp"
#include "distributed/train/rank_groups.hpp"

#include <algorithm>
#include <cstdio>
#include <mutex>

namespace moe::step {
namespace {

const char* stage_name(dist::WaveStage s) {
  switch (s) {
    case dist::WaveStage::dispatch: return "dispatch";
    case dist::WaveStage::compute: return "compute";
    case dist::WaveStage::combine: return "combine";
  }
  return "?";
}

const char* op_name(dist::WaveOp op) {
  switch (op) {
    case dist::WaveOp::dispatch: return "dispatch";
    case dist::WaveOp::launch: return "launch";
    case dist::WaveOp::wait: return "wait";
    case dist::WaveOp::combine: return "combine";
  }
  return "?";
}

const dist::WaveSpan* find(const dist::WaveTimeline& t, int wave, dist::WaveStage stage) {
  for (const auto& s : t)
    if (s.wave == wave && s.stage == stage) return &s;
  return nullptr;
}

// Microseconds during which both spans ran (0 when either is missing).
double overlap(const dist::WaveSpan* a, const dist::WaveSpan* b) {
  if (!a || !b) return 0;
  return std::max(0.0, std::min(a->end_us, b->end_us) - std::max(a->begin_us, b->begin_us));
}

std::string span_text(const dist::WaveSpan* s) {
  if (!s) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f-%.1f", s->begin_us, s->end_us);
  return buf;
}

void print_timeline(const dist::WaveTimeline& t, int waves, const char* pass, std::ostream& out) {
  out << "  " << pass << " (µs from the start of the pass; compute on the worker, the rest on the rank's thread):\n";
  char line[160];
  std::snprintf(line, sizeof line, "    %-5s %-18s %-18s %-18s %s\n", "wave", "dispatch", "compute", "combine",
                "compute overlapped next dispatch / previous combine");
  out << line;
  for (int w = 0; w < waves; ++w) {
    const auto* x = find(t, w, dist::WaveStage::compute);
    const double with_next = overlap(x, find(t, w + 1, dist::WaveStage::dispatch));
    const double with_previous = overlap(x, find(t, w - 1, dist::WaveStage::combine));
    char both[48];
    std::snprintf(both, sizeof both, "%.1f / %.1f µs", with_next, with_previous);
    std::snprintf(line, sizeof line, "    %-5d %-18s %-18s %-18s %s\n", w,
                  span_text(find(t, w, dist::WaveStage::dispatch)).c_str(), span_text(x).c_str(),
                  span_text(find(t, w, dist::WaveStage::combine)).c_str(), both);
    out << line;
  }
}

nlohmann::json timeline_json(const dist::WaveTimeline& t) {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& s : t)
    j.push_back({{"wave", s.wave}, {"stage", stage_name(s.stage)}, {"begin_us", s.begin_us}, {"end_us", s.end_us},
                 {"on_worker", s.on_worker}});
  return j;
}

}  // namespace

WaveTrace run_waves(const StepProblem& p, int waves) {
  const ProcessGroups groups(p.layout);
  const MoeConfig& c = p.config;
  const int n = p.tokens_per_rank, world = p.layout.world;
  const int local = c.num_experts / p.layout.ep;
  if (waves < 2 || waves > local)
    throw std::invalid_argument("--expert-waves " + std::to_string(waves) + ": need 2 ≤ waves ≤ the " +
                                std::to_string(local) + " local experts per rank (every wave has an expert on every "
                                "rank)");
  WaveTrace trace;
  trace.waves = waves;
  trace.local_experts = local;
  trace.schedule = dist::wave_schedule(waves);
  trace.wave_experts.resize(static_cast<size_t>(waves));
  for (int e = 0; e < c.num_experts; ++e)
    trace.wave_experts[static_cast<size_t>(dist::wave_of_local_expert(e % local, local, waves))].push_back(e);
  trace.ranks.resize(static_cast<size_t>(world));

  std::mutex mu;
  InprocWorld(world, RankExecution::threads).run([&](Communicator& comm) {
    const int r = comm.rank();
    const dist::RankGroups rank_groups(comm, groups);
    const dist::LayerShard<double> shard = dist::shard_layer(c, p.params, groups, r);
    const Matrix<double> x = p.x.middleRows(Eigen::Index(r) * n, n);
    const Matrix<double> dy = p.grad_y.middleRows(Eigen::Index(r) * n, n);
    dist::RouterInputs router;
    if (c.hash_routing) router.token_ids = p.input_ids.segment(Eigen::Index(r) * n, n);
    const dist::LocalTokens tokens{{}, std::vector<int>(static_cast<size_t>(n), 0), 1};
    // The same layer unwaved and waved: y and dL/dx of each.
    Matrix<double> y[2], dx[2];
    WaveRank mine;
    for (int i = 0; i < 2; ++i) {
      dist::MoeLayerRank<double> layer(c, shard, rank_groups, dist::DispatcherKind::alltoall, dist::cpu_kernels(),
                                       nullptr, i == 0 ? 1 : waves);
      dist::GlobalAuxCounts unused;
      y[i] = layer.forward(x, router, tokens, unused);
      dist::LayerShard<double> grads = dist::zeros_like(shard);
      dx[i] = layer.backward(dy, 0.0, 0.0, grads);
      if (const auto* w = layer.waves()) {
        mine.rank = r;
        for (int k = 0; k < waves; ++k) {
          mine.expert_rows.push_back(w->expert_rows(k));
          mine.source_rows.push_back(w->source_rows(k));
        }
        mine.forward = w->forward_timeline();
        mine.backward = w->backward_timeline();
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    trace.ranks[static_cast<size_t>(r)] = std::move(mine);
    trace.max_abs_y = std::max(trace.max_abs_y, (y[1] - y[0]).cwiseAbs().maxCoeff());
    trace.max_abs_grad_x = std::max(trace.max_abs_grad_x, (dx[1] - dx[0]).cwiseAbs().maxCoeff());
  });
  return trace;
}

void print_waves(const WaveTrace& t, std::ostream& out) {
  out << "\n── wave-scheduled EP: " << t.waves << " waves over " << t.local_experts
      << " local experts per rank (distributed/train/expert_waves.hpp) ──\n";
  for (int w = 0; w < t.waves; ++w) {
    out << "  wave " << w << ":";
    for (int e : t.wave_experts[static_cast<size_t>(w)]) out << " e" << e;
    out << "\n";
  }
  out << "  rows per wave (at the rank's experts / its tokens' rows back):\n";
  for (const WaveRank& r : t.ranks) {
    out << "    rank " << r.rank << ":";
    for (int w = 0; w < t.waves; ++w)
      out << "  wave " << w << " " << r.expert_rows[static_cast<size_t>(w)] << " / "
          << r.source_rows[static_cast<size_t>(w)];
    out << "\n";
  }
  out << "  every rank's program (its own thread │ the worker):\n";
  int computing = -1;
  for (const dist::WaveStep& s : t.schedule) {
    if (s.op == dist::WaveOp::launch) {
      computing = s.wave;
      out << "    launch compute of wave " << s.wave << " on the worker\n";
      continue;
    }
    if (s.op == dist::WaveOp::wait) {
      out << "    wait for wave " << s.wave << "'s compute\n";
      computing = -1;
      continue;
    }
    char line[96];
    std::snprintf(line, sizeof line, "    %-8s wave %-3d │ %s\n", op_name(s.op), s.wave,
                  computing >= 0 ? ("computing wave " + std::to_string(computing)).c_str() : "idle");
    out << line;
  }
  const WaveRank& r0 = t.ranks.front();
  out << "  rank 0, as it ran:\n";
  print_timeline(r0.forward, t.waves, "forward", out);
  print_timeline(r0.backward, t.waves, "backward", out);
  char line[160];
  std::snprintf(line, sizeof line, "  against the unwaved AlltoAll run: max |Δy| %.1e, max |ΔdL/dx| %.1e — %s\n",
                t.max_abs_y, t.max_abs_grad_x, t.bitwise() ? "bit for bit" : "DIFFERENT");
  out << line;
}

nlohmann::json waves_json(const WaveTrace& t) {
  nlohmann::json j{{"waves", t.waves},
                   {"local_experts", t.local_experts},
                   {"wave_experts", t.wave_experts},
                   {"max_abs_y", t.max_abs_y},
                   {"max_abs_grad_x", t.max_abs_grad_x},
                   {"bitwise", t.bitwise()}};
  j["schedule"] = nlohmann::json::array();
  for (const auto& s : t.schedule) j["schedule"].push_back({{"op", op_name(s.op)}, {"wave", s.wave}});
  j["ranks"] = nlohmann::json::array();
  for (const WaveRank& r : t.ranks)
    j["ranks"].push_back({{"rank", r.rank},
                          {"expert_rows", r.expert_rows},
                          {"source_rows", r.source_rows},
                          {"forward", timeline_json(r.forward)},
                          {"backward", timeline_json(r.backward)}});
  return j;
}

}  // namespace moe::step
