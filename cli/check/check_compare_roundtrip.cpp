#include "cli/check/check_compare_roundtrip.hpp"
#include "cli/check/check_step_roundtrip.hpp"

#include "cli/run_options.hpp"
#include "compare/dump_compare.hpp"
#include "compare/dump_names.hpp"
#include "compare/dump_tensors.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/moe_layer_rank.hpp"
#include "formats/config_json.hpp"
#include "formats/npy.hpp"
#include "reference/model.hpp"
#include "reference/presets.hpp"
#include "reference/process_groups.hpp"
#include "reference/random_init.hpp"
#include "storage/durable_files.hpp"
#include "storage/json_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <optional>
#include <sstream>
#include <stdexcept>

namespace moe::cli {
namespace {

namespace fs = std::filesystem;
namespace tensor = compare::tensor;  // the dump's tensor names (compare/dump_names.hpp)
using Shape = std::vector<std::int64_t>;

formats::NpyArray of(const Matrix<double>& m, Shape shape) {
  std::vector<double> v;
  v.reserve(static_cast<size_t>(m.size()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) v.push_back(m(r, c));
  return formats::NpyArray::of_reals(std::move(shape), std::move(v));
}
formats::NpyArray of(const Matrix<double>& m) { return of(m, {m.rows(), m.cols()}); }

// A change made to a written dump before compare judges it, and what compare must then say: a control that shows
// the main job's comparison can fail (or, for a replay, that a correct run whose routing differs only at a tie
// passes).
enum class Control {
  none,
  tie_swapped,       // experts 0 and 1 identical; every row that selected one of them selects the other: replayed
  row_beyond_ties,   // one row of rank 0's routing map moved to an expert far below the k-th: fails the map
  expert_grad_1pct,  // one expert's fc2 gradient × 1.01 on every rank holding it: fails as a systematic error
  replica_as_pool,   // a dp-2 global_aux dump cut to replica 0, replica 1's counts given as its aux_pool: passes
  pool_left_out,     // the same cut without the aux_pool: fails (the pool's rows are in the statistic)
};

struct Case {
  std::string name;
  MoeConfig config;
  std::optional<Precision> precision;  // compare --precision: unset, the arrays' (float64)
  Control control = Control::none;
  bool identical_experts_01 = false;  // experts 0 and 1 get the same router row, bias and weights
};

// Layers compare takes (no latent projection) that between them hold what it reassembles: expert
// bias and its counts, seq_aux and z losses, the shared expert with and without its gate, probabilities on the
// expert input, a hash layer's input ids and tid2eid table. And a layer that rounds its activations to bf16 at
// the storage points, judged as a bf16 framework is (--precision bfloat16): by compare's bf16 error model, whose
// allowance comes from the oracle rerun with bf16 storage (without it, the rounding fails the float tolerances).
std::vector<Case> cases() {
  MoeConfig gated = layer_preset("tiny-v4").config;
  gated.shared_expert_gate = true;
  gated.z_loss_coeff = 1e-3;
  // A DeepSeek-V4 hash layer as the model makes its first layers (ModelConfig::layer_config).
  ModelConfig model;
  model.layer = layer_preset("tiny-v4").config;
  model.n_hash_layers = 1;
  MoeConfig bf16 = layer_preset("tiny-v4").config;
  bf16.bf16_storage = true;  // the parallel layer's; dump.json's config has no such key, the oracle runs in double
  return {{"tiny-v4 +gate +z", gated, {}},
          {"tiny-top1", layer_preset("tiny-top1").config, {}},
          {"tiny-v4 hash layer", model.layer_config(0), {}},
          {"tiny-v4 bf16 storage", bf16, Precision::bfloat16}};
}

// The controls, each on one layout: a replay that must pass, then a flip and a scale that must fail.
std::vector<Case> controls() {
  const MoeConfig v4 = layer_preset("tiny-v4").config;
  MoeConfig bf16 = v4;
  bf16.bf16_storage = true;
  // Without a balance loss: its own top-k breaks the tie the same way in both runs, so its share of the router's
  // gradient would not trade places with the selection's (swap_tied_experts).
  MoeConfig no_aux = v4;
  no_aux.aux_loss_type = AuxLossType::none;
  no_aux.aux_loss_coeff = 0;
  // global_aux pooled with rows outside the dump (transformers pools every layer; here the other replica), its aux
  // map the routing's own selection (softmax, no bias, no groups, no capacity) so that the map gives the counts.
  MoeConfig pooled = layer_preset("tiny-top1").config;
  pooled.aux_loss_type = AuxLossType::global_aux;
  pooled.aux_loss_coeff = 0.1;
  return {{"tiny-v4 tie replayed", no_aux, {}, Control::tie_swapped, true},
          {"tiny-v4 row beyond ties (must fail)", v4, {}, Control::row_beyond_ties},
          {"tiny-v4 bf16 expert grad 1% (must fail)", bf16, Precision::bfloat16, Control::expert_grad_1pct},
          {"tiny-top1 global_aux, replica 1 as aux_pool", pooled, {}, Control::replica_as_pool},
          {"tiny-top1 global_aux, aux_pool left out (must fail)", pooled, {}, Control::pool_left_out}};
}

// The layout of each control: the tie on the widest, the pool on two replicas of one rank each.
ParallelLayout control_layout(Control control) {
  if (control == Control::tie_swapped) return ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2};
  if (control == Control::replica_as_pool || control == Control::pool_left_out) return ParallelLayout{.world = 2};
  return ParallelLayout{.world = 4, .ep = 2, .etp = 2};
}

// Every cut compare makes: experts over ep with ETP halves, the shared expert over tp, replicas over dp.
std::vector<ParallelLayout> layouts() {
  return {ParallelLayout{.world = 4, .ep = 2, .etp = 2}, ParallelLayout{.world = 4, .tp = 2, .ep = 4},
          ParallelLayout{.world = 8, .tp = 2, .ep = 2, .etp = 2}};
}

// The parallel system's layer on `layout`, every rank's tensors written under `dir` as compare/README.md says.
void write_dump(const Case& k, const ParallelLayout& layout, const fs::path& dir) {
  const MoeConfig& c = k.config;
  const int S = 16, vocab = 16, h = c.hidden, E = c.num_experts;
  MoeParams<double> params = random_params<double>(c, vocab, 91);
  if (k.identical_experts_01) {  // the same expert twice: a tie at every row where it is the k-th choice
    params.router_weight.row(1) = params.router_weight.row(0);
    if (c.expert_bias) params.expert_bias(1) = params.expert_bias(0);
    params.expert_fc1[1] = params.expert_fc1[0];
    params.expert_fc2[1] = params.expert_fc2[0];
  }
  std::vector<Matrix<double>> x, dy;  // per replica [S, h]
  std::vector<IndexMatrix> ids;       // per replica [1, S] (hash layers)
  for (int d = 0; d < layout.dp(); ++d) {
    const MoeInputs<double> in = random_inputs<double>(c, S, 1, vocab, 92 + static_cast<std::uint64_t>(d));
    x.push_back(in.x);
    ids.push_back(in.input_ids);
    dy.push_back(random_grad_y<double>(c, S, 192 + static_cast<std::uint64_t>(d)));
  }
  const ProcessGroups groups(layout);
  for (int r = 0; r < layout.world; ++r) fs::create_directories(dir / ("rank" + std::to_string(r)));
  InprocWorld(layout.world).run([&](Communicator& comm) {
    const int rank = comm.rank(), j = groups.rank_in(GroupKind::tp, rank), d = groups.rank_in(GroupKind::dp, rank);
    const dist::RankGroups comms(comm, groups);
    const dist::LayerShard<double> shard = dist::shard_layer(c, params, groups, rank);
    const Eigen::Index n = S / layout.tp;
    const Matrix<double> xs = x[static_cast<size_t>(d)].middleRows(j * n, n);
    const Matrix<double> dys = dy[static_cast<size_t>(d)].middleRows(j * n, n);
    dist::MoeLayerRank<double> layer(c, shard, comms, dist::DispatcherKind::alltoall);
    dist::GlobalAuxCounts global_aux;
    dist::RouterInputs router_inputs;
    if (c.hash_routing) router_inputs.token_ids = ids[static_cast<size_t>(d)].row(0).segment(j * n, n).transpose();
    const Matrix<double> y = layer.forward(xs, router_inputs,
                                           dist::LocalTokens{{}, std::vector<int>(static_cast<size_t>(n), 0), 1}, global_aux);
    dist::LayerShard<double> grads = dist::zeros_like(shard);
    // compare's loss: Σ⟨dy, y⟩ + aux_loss + z_loss, each rank's loss shares at weight 1.
    const Matrix<double> dx = layer.backward(dys, 1.0, 1.0, grads);

    const fs::path out = dir / ("rank" + std::to_string(rank));
    const auto put = [&](const std::string& name, const formats::NpyArray& a) {
      formats::write_npy(out / (name + ".npy"), a);
    };
    const Shape rows{n, 1, h};
    put(tensor::kHiddenStates, of(xs, rows));
    put(tensor::kOutputGrad, of(dys, rows));
    put(tensor::kOutput, of(y, rows));
    put(tensor::kHiddenStatesGrad, of(dx, rows));
    put(tensor::kRouterWeight, of(shard.router_weight));
    put(tensor::kProbs, of(layer.routing().probs));
    put(tensor::kRoutingMap, formats::NpyArray::of_booleans(
                                  {n, E}, std::vector<std::uint8_t>(layer.routing().routing_map.data(),
                                                                   layer.routing().routing_map.data() + n * E)));
    put(tensor::kRouterWeightGrad, of(grads.router_weight));
    if (c.expert_bias) {
      put(tensor::kExpertBias, of(shard.expert_bias.transpose(), {E}));
      put(tensor::kLocalTokensPerExpert, formats::NpyArray::of_integers({E}, layer.assignments()));
    }
    for (size_t i = 0; i < shard.experts.fc1.size(); ++i) {
      const auto local = static_cast<std::int64_t>(i);
      const std::string fc1 = compare::expert_weight_name(compare::ExpertNaming::sequential, local, "linear_fc1");
      const std::string fc2 = compare::expert_weight_name(compare::ExpertNaming::sequential, local, "linear_fc2");
      put(fc1, of(shard.experts.fc1[i]));
      put(fc2, of(shard.experts.fc2[i]));
      put(fc1 + ".grad", of(grads.experts.fc1[i]));
      put(fc2 + ".grad", of(grads.experts.fc2[i]));
    }
    if (c.has_shared_expert()) {
      put(tensor::kSharedFc1, of(shard.shared_fc1));
      put(tensor::kSharedFc2, of(shard.shared_fc2));
      put(tensor::kSharedFc1Grad, of(grads.shared_fc1));
      put(tensor::kSharedFc2Grad, of(grads.shared_fc2));
      if (c.shared_expert_gate) {
        put(tensor::kSharedGate, of(shard.shared_gate));
        put(tensor::kSharedGateGrad, of(grads.shared_gate));
      }
    }
    if (c.hash_routing) {
      put("input_ids", formats::NpyArray::of_integers({n, 1}, std::vector<std::int64_t>(router_inputs.token_ids.data(),
                                                                                     router_inputs.token_ids.data() + n)));
      put(tensor::kTid2Eid, formats::NpyArray::of_integers({shard.tid2eid.rows(), shard.tid2eid.cols()},
                                                          std::vector<std::int64_t>(shard.tid2eid.data(),
                                                                                    shard.tid2eid.data() + shard.tid2eid.size())));
    }
    if (c.aux_loss_type != AuxLossType::none) put("aux_loss", formats::NpyArray::of_reals({}, {layer.aux_share()}));
    if (c.z_loss_coeff > 0) put("z_loss", formats::NpyArray::of_reals({}, {layer.z_share()}));
  });

  nlohmann::ordered_json meta{{"format", "moe-dump/1"},
                              {"producer", "moe-oracle's parallel system (check)"},
                              {"config", formats::config_to_json(c)},
                              {"semantics", "intended"},
                              {"layout", {{"world", layout.world}, {"tp", layout.tp}, {"ep", layout.ep}, {"etp", layout.etp}}},
                              {"shape", {{"seq", S}, {"batch", 1}}},
                              {"dtype", "float64"},
                              {"dispatcher", "alltoall"}};
  storage::write_file_synced(dir / "dump.json", meta.dump(2));
}

// Swaps what experts 0 and 1 are given in a written dump wherever a row selected one of them alone: the routing map
// and probabilities of those rows, every rank's counts and rows 0 and 1 of its router gradient, and the two experts'
// gradients on the ranks holding them. Experts 0 and 1 being the same expert (identical_experts_01), that is the run
// whose ties went the other way: a row's share of the router gradient moves from row 0 to row 1 unchanged, and the
// rows that took both put the same share in each. Returns the rows swapped.
std::int64_t swap_tied_experts(const ParallelLayout& layout, const fs::path& dir) {
  const ProcessGroups groups(layout);
  std::int64_t swapped = 0;
  for (int r = 0; r < layout.world; ++r) {
    const fs::path rank = dir / ("rank" + std::to_string(r));
    formats::NpyArray map = formats::read_npy_widened(rank / tensor::file(tensor::kRoutingMap));
    formats::NpyArray probs = formats::read_npy_widened(rank / tensor::file(tensor::kProbs));
    const auto E = static_cast<size_t>(map.shape[1]);
    for (size_t row = 0; row * E < map.booleans.size(); ++row) {
      auto* m = &map.booleans[row * E];
      if (m[0] == m[1]) continue;
      std::swap(m[0], m[1]);
      std::swap(probs.reals[row * E], probs.reals[row * E + 1]);
      ++swapped;
    }
    formats::write_npy(rank / tensor::file(tensor::kRoutingMap), map);
    formats::write_npy(rank / tensor::file(tensor::kProbs), probs);
    // This rank's rows' counts: a row that took expert 0 alone now takes 1, so the two counts trade places (0 kept
    // the rows that took both, 1 gains the rest).
    if (fs::exists(rank / tensor::file(tensor::kLocalTokensPerExpert))) {
      formats::NpyArray counts = formats::read_npy_widened(rank / tensor::file(tensor::kLocalTokensPerExpert));
      std::swap(counts.integers[0], counts.integers[1]);
      formats::write_npy(rank / tensor::file(tensor::kLocalTokensPerExpert), counts);
    }
    formats::NpyArray router = formats::read_npy_widened(rank / tensor::file(tensor::kRouterWeightGrad));  // [E, h]
    const auto h = static_cast<size_t>(router.shape[1]);
    std::swap_ranges(router.reals.begin(), router.reals.begin() + static_cast<std::ptrdiff_t>(h),
                     router.reals.begin() + static_cast<std::ptrdiff_t>(h));
    formats::write_npy(rank / tensor::file(tensor::kRouterWeightGrad), router);
    if (groups.rank_in(GroupKind::ep, r) != 0) continue;  // experts 0 and 1 are local 0 and 1 of EP rank 0
    for (const char* which : {"linear_fc1", "linear_fc2"}) {
      const auto name = [&](std::int64_t i) {
        return rank / (compare::expert_weight_name(compare::ExpertNaming::sequential, i, which) + ".grad.npy");
      };
      const formats::NpyArray g0 = formats::read_npy_widened(name(0)), g1 = formats::read_npy_widened(name(1));
      formats::write_npy(name(0), g1);
      formats::write_npy(name(1), g0);
    }
  }
  return swapped;
}

// Rank 0's first row moved from its first selected expert to its first unselected one: far from any tie.
void move_a_row(const fs::path& dir) {
  const fs::path file = dir / "rank0" / tensor::file(tensor::kRoutingMap);
  formats::NpyArray map = formats::read_npy_widened(file);
  const auto E = static_cast<size_t>(map.shape[1]);
  size_t on = 0, off = 0;
  while (on < E && !map.booleans[on]) ++on;
  while (off < E && map.booleans[off]) ++off;
  if (on == E || off == E) throw std::logic_error("row 0 selects no expert or every expert");
  std::swap(map.booleans[on], map.booleans[off]);
  formats::write_npy(file, map);
}

// Expert 0's fc2 gradient × 1.01 on every rank of EP rank 0.
void scale_expert_grad(const ParallelLayout& layout, const fs::path& dir) {
  const ProcessGroups groups(layout);
  for (int r = 0; r < layout.world; ++r) {
    if (groups.rank_in(GroupKind::ep, r) != 0) continue;
    const fs::path file = dir / ("rank" + std::to_string(r)) /
                          (compare::expert_weight_name(compare::ExpertNaming::sequential, 0, "linear_fc2") + ".grad.npy");
    formats::NpyArray g = formats::read_npy_widened(file);
    for (double& v : g.reals) v *= 1.01;
    formats::write_npy(file, g);
  }
}

// A world-2, dp-2 dump cut to replica 0 (rank 0, a world of 1). With `pool`, replica 1's aux-map counts (its routing
// map's columns: the controls' layer selects by its aux map) and rows become dump.json's aux_pool, which is what
// global_aux pooled over both replicas: the cut dump is the same run, described as transformers' pooled layers are.
void cut_to_replica_0(const fs::path& dir, bool pool) {
  const formats::NpyArray map = formats::read_npy_widened(dir / "rank1" / tensor::file(tensor::kRoutingMap));
  const auto E = static_cast<size_t>(map.shape[1]);
  std::vector<std::int64_t> counts(E, 0);
  for (size_t i = 0; i < map.booleans.size(); ++i) counts[i % E] += map.booleans[i] ? 1 : 0;
  fs::remove_all(dir / "rank1");
  nlohmann::json meta = storage::read_json_file(dir / "dump.json");
  meta["layout"]["world"] = 1;
  if (pool) meta["aux_pool"] = {{"counts", counts}, {"tokens", map.shape[0]}, {"from", "replica 1 of the run"}};
  storage::write_file_synced(dir / "dump.json", meta.dump(2));
}

// What a comparison said, for the report: the first failing tensor and where, or why a pass was not whole.
std::string first_failure_text(const compare::Comparison& c) {
  const compare::TensorResult* f = c.first_failure();
  if (!f) return "";
  std::ostringstream s;
  s.precision(17);
  if (f->first)
    s << f->tensor << " rank " << f->first->rank << " index " << f->first->index << ": dump " << f->first->got
      << ", oracle " << f->first->want;
  else
    s << f->tensor << " rank " << f->fit_rank << " is " << compare::describe_scale(f->fit);
  return s.str();
}

// One round trip: the dump written, the case's control applied, compare's verdict judged against what the control
// requires.
RoundTrip round_trip(const Case& k, const ParallelLayout& layout, const fs::path& scratch) {
  const fs::path dir = scratch / "compare-round-trip";
  fs::remove_all(dir);
  write_dump(k, layout, dir);
  std::int64_t swapped = 0;
  if (k.control == Control::tie_swapped) swapped = swap_tied_experts(layout, dir);
  if (k.control == Control::row_beyond_ties) move_a_row(dir);
  if (k.control == Control::expert_grad_1pct) scale_expert_grad(layout, dir);
  if (k.control == Control::replica_as_pool || k.control == Control::pool_left_out)
    cut_to_replica_0(dir, k.control == Control::replica_as_pool);
  RoundTrip t{k.name, layout, false, 0, "", ""};
  compare::ReadOptions options;
  options.precision = k.precision;
  const compare::Comparison c = compare::compare_dump(compare::read_dump(dir, options));
  fs::remove_all(dir);
  t.tensors = static_cast<int>(c.tensors.size());
  const bool whole = c.backward && c.absent.empty() && c.ignored.empty();
  const compare::TensorResult* f = c.first_failure();
  const std::string fc2 = compare::expert_weight_name(compare::ExpertNaming::sequential, 0, "linear_fc2") + ".grad";
  switch (k.control) {
    case Control::none: t.pass = c.pass() && whole; break;
    case Control::tie_swapped:
      t.pass = c.pass() && whole && swapped > 0 && c.replay.replayed == swapped;
      if (!t.pass && c.pass())
        t.first_failure = std::to_string(swapped) + " tied row(s) swapped, " + std::to_string(c.replay.replayed) +
                          " replayed (every swapped row must be, and at least one swapped)";
      break;
    case Control::row_beyond_ties:
      t.pass = !c.pass() && f->tensor == tensor::kRoutingMap && c.replay.beyond_rounding.size() == 1;
      if (!t.pass) t.first_failure = "a row moved far from any tie was not failed as beyond rounding";
      break;
    case Control::expert_grad_1pct:
      t.pass = !c.pass() && f->tensor == fc2 && f->systematic;
      if (!t.pass) t.first_failure = "a 1% scale on " + fc2 + " was not failed as a systematic error";
      break;
    case Control::replica_as_pool: t.pass = c.pass() && whole; break;
    case Control::pool_left_out:
      t.pass = !c.pass() && std::any_of(c.tensors.begin(), c.tensors.end(), [](const compare::TensorResult& r) {
                 return r.tensor == tensor::kRouterWeightGrad && !r.pass();
               });
      if (!t.pass) t.first_failure = "a global_aux dump whose pooled rows were left out did not fail router.weight.grad";
      break;
  }
  if (t.first_failure.empty() && !t.pass) {
    t.first_failure = first_failure_text(c);
    if (t.first_failure.empty())
      t.first_failure = "the dump was not compared whole (" + std::to_string(c.absent.size()) + " tensors absent, " +
                        std::to_string(c.ignored.size()) + " ignored)";
  }
  return t;
}

}  // namespace

std::vector<RoundTrip> compare_round_trips(const fs::path& scratch) {
  // `scratch` is this run's own: removed whole when the round trips end, whether they pass, fail or throw.
  struct RemovedAtExit {
    const fs::path& path;
    ~RemovedAtExit() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } removed{scratch};
  std::vector<RoundTrip> out;
  for (const Case& k : cases())
    for (const ParallelLayout& layout : layouts()) out.push_back(round_trip(k, layout, scratch));
  for (const Case& k : controls()) out.push_back(round_trip(k, control_layout(k.control), scratch));
  for (RoundTrip& t : step_round_trips(scratch)) out.push_back(std::move(t));
  return out;
}

void print_round_trips(const std::vector<RoundTrip>& trips, std::ostream& out) {
  if (trips.empty()) return;
  int tensors = 0, failed = 0;
  for (const RoundTrip& t : trips) {
    tensors += t.tensors;
    if (!t.pass) {
      ++failed;
      out << "compare round trip FAIL: " << t.preset << " on " << layout_name(t.layout) << ": " << t.first_failure << "\n";
    }
  }
  size_t step_controls = 0;
  std::string shown;
  for (const RoundTrip& t : trips)
    if (!t.shows.empty()) {
      ++step_controls;
      shown += ", " + t.shows;
    }
  out << "compare round trip: the parallel layer dumped as moe-dump/1 and its training step as moe-step/1, judged "
      << "by compare on " << trips.size() << " (model, layout) pairs, " << tensors << " tensors, "
      << controls().size() + step_controls << " of them controls (a tie replayed, a flip beyond ties and a 1% scale "
      << "failed, a replica pooled as aux_pool and left out" << shown << "): " << (failed ? "FAIL" : "PASS") << "\n";
}

}  // namespace moe::cli
