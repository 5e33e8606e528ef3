#include "tools/check_compare_roundtrip.hpp"

#include "compare/dump_compare.hpp"
#include "distributed/comm/inproc_world.hpp"
#include "distributed/train/moe_layer_rank.hpp"
#include "golden/case_json.hpp"
#include "golden/npy.hpp"
#include "reference/model.hpp"
#include "reference/presets.hpp"
#include "reference/random_init.hpp"
#include "storage/durable_files.hpp"
#include "tools/run_options.hpp"

#include <nlohmann/json.hpp>

#include <sstream>

namespace moe::cli {
namespace {

namespace fs = std::filesystem;
using Shape = std::vector<std::int64_t>;

golden::NpyArray of(const Matrix<double>& m, Shape shape) {
  std::vector<double> v;
  v.reserve(static_cast<size_t>(m.size()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) v.push_back(m(r, c));
  return golden::NpyArray::of_reals(std::move(shape), std::move(v));
}
golden::NpyArray of(const Matrix<double>& m) { return of(m, {m.rows(), m.cols()}); }

struct Case {
  std::string name;
  MoeConfig config;
  std::string precision;  // compare --precision: empty, the arrays' (float64)
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
  return {{"tiny-v4 +gate +z", gated, ""},
          {"tiny-top1", layer_preset("tiny-top1").config, ""},
          {"tiny-v4 hash layer", model.layer_config(0), ""},
          {"tiny-v4 bf16 storage", bf16, "bfloat16"}};
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
  const MoeParams<double> params = random_params<double>(c, vocab, 91);
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
    const auto put = [&](const std::string& name, const golden::NpyArray& a) { golden::write_npy(out / (name + ".npy"), a); };
    const Shape rows{n, 1, h};
    put("hidden_states", of(xs, rows));
    put("output.grad", of(dys, rows));
    put("output", of(y, rows));
    put("hidden_states.grad", of(dx, rows));
    put("router.weight", of(shard.router_weight));
    put("router.weight.grad", of(grads.router_weight));
    if (c.expert_bias) {
      put("router.expert_bias", of(shard.expert_bias.transpose(), {E}));
      put("router.local_tokens_per_expert", golden::NpyArray::of_integers({E}, layer.assignments()));
    }
    for (size_t i = 0; i < shard.experts.fc1.size(); ++i) {
      const std::string base = "experts.local_experts." + std::to_string(i);
      put(base + ".linear_fc1.weight", of(shard.experts.fc1[i]));
      put(base + ".linear_fc2.weight", of(shard.experts.fc2[i]));
      put(base + ".linear_fc1.weight.grad", of(grads.experts.fc1[i]));
      put(base + ".linear_fc2.weight.grad", of(grads.experts.fc2[i]));
    }
    if (c.has_shared_expert()) {
      put("shared_experts.linear_fc1.weight", of(shard.shared_fc1));
      put("shared_experts.linear_fc2.weight", of(shard.shared_fc2));
      put("shared_experts.linear_fc1.weight.grad", of(grads.shared_fc1));
      put("shared_experts.linear_fc2.weight.grad", of(grads.shared_fc2));
      if (c.shared_expert_gate) {
        put("shared_experts.gate_weight", of(shard.shared_gate));
        put("shared_experts.gate_weight.grad", of(grads.shared_gate));
      }
    }
    if (c.hash_routing) {
      put("input_ids", golden::NpyArray::of_integers({n, 1}, std::vector<std::int64_t>(router_inputs.token_ids.data(),
                                                                                     router_inputs.token_ids.data() + n)));
      put("router.tid2eid", golden::NpyArray::of_integers({shard.tid2eid.rows(), shard.tid2eid.cols()},
                                                          std::vector<std::int64_t>(shard.tid2eid.data(),
                                                                                    shard.tid2eid.data() + shard.tid2eid.size())));
    }
    if (c.aux_loss_type != AuxLossType::none) put("aux_loss", golden::NpyArray::of_reals({}, {layer.aux_share()}));
    if (c.z_loss_coeff > 0) put("z_loss", golden::NpyArray::of_reals({}, {layer.z_share()}));
  });

  nlohmann::ordered_json meta{{"format", "moe-dump/1"},
                              {"producer", "moe-oracle's parallel system (check)"},
                              {"config", golden::config_to_json(c)},
                              {"semantics", "intended"},
                              {"layout", {{"world", layout.world}, {"tp", layout.tp}, {"ep", layout.ep}, {"etp", layout.etp}}},
                              {"shape", {{"seq", S}, {"batch", 1}}},
                              {"dtype", "float64"},
                              {"dispatcher", "alltoall"}};
  storage::write_file_synced(dir / "dump.json", meta.dump(2));
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
  for (const Case& k : cases()) {
    for (const ParallelLayout& layout : layouts()) {
      const fs::path dir = scratch / "compare-round-trip";
      fs::remove_all(dir);
      write_dump(k, layout, dir);
      RoundTrip t{k.name, layout, false, 0, ""};
      compare::ReadOptions options;
      options.precision = k.precision;
      const compare::Comparison c = compare::compare_dump(compare::read_dump(dir, options));
      fs::remove_all(dir);
      t.pass = c.pass() && c.backward && c.absent.size() == 2 && c.ignored.empty();  // absent: probs, routing map
      t.tensors = static_cast<int>(c.tensors.size());
      if (const compare::TensorResult* f = c.first_failure()) {
        std::ostringstream s;
        s.precision(17);
        s << f->tensor << " rank " << f->first->rank << " index " << f->first->index << ": dump " << f->first->got
          << ", oracle " << f->first->want;
        t.first_failure = s.str();
      } else if (!t.pass) {
        t.first_failure = "the dump was not compared whole (" + std::to_string(c.absent.size()) + " tensors absent, " +
                          std::to_string(c.ignored.size()) + " ignored)";
      }
      out.push_back(t);
    }
  }
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
  out << "compare round trip: the parallel layer dumped as moe-dump/1 and judged by compare on " << trips.size()
      << " (layer, layout) pairs, " << tensors << " tensors: " << (failed ? "FAIL" : "PASS") << "\n";
}

}  // namespace moe::cli
