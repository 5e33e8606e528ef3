#include "distributed/checkpoint.hpp"

#include "reference/process_groups.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>

namespace moe::dist {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr const char* kFormat = "moe-checkpoint/1";

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("checkpoint: " + what); }

std::uint64_t fnv1a(const double* data, Eigen::Index n) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  for (size_t i = 0; i < static_cast<size_t>(n) * sizeof(double); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  return h;
}

json model_json(const ModelConfig& m) {
  const MoeConfig& c = m.layer;
  auto opt = [](const std::optional<double>& v) { return v ? json(*v) : json(nullptr); };
  return {{"hidden", c.hidden},
          {"num_experts", c.num_experts},
          {"topk", c.topk},
          {"ffn_hidden", c.ffn_hidden},
          {"score_function", to_string(c.score_function)},
          {"pre_softmax", c.pre_softmax},
          {"topk_scaling_factor", c.topk_scaling_factor},
          {"normalization", to_string(c.normalization)},
          {"expert_bias", c.expert_bias},
          {"num_groups", c.num_groups},
          {"group_topk", c.group_topk},
          {"swiglu_clamp", opt(c.swiglu_clamp)},
          {"shared_expert_ffn_hidden", c.shared_expert_ffn_hidden},
          {"shared_expert_gate", c.shared_expert_gate},
          {"shared_expert_clamp", c.shared_expert_clamp},
          {"latent_size", c.latent_size},
          {"apply_probs_on_input", c.apply_probs_on_input},
          {"capacity_factor", opt(c.capacity_factor)},
          {"drop_policy", to_string(c.drop_policy)},
          {"pad_to_capacity", c.pad_to_capacity},
          {"aux_loss_type", to_string(c.aux_loss_type)},
          {"aux_loss_coeff", c.aux_loss_coeff},
          {"z_loss_coeff", c.z_loss_coeff},
          {"bias_update_rate", opt(c.bias_update_rate)},
          {"semantics", c.semantics.spec()},  // the objective the optimizer state belongs to
          {"num_layers", m.num_layers},
          {"n_hash_layers", m.n_hash_layers},
          {"vocab", m.vocab},
          {"rms_eps", m.rms_eps}};
}

// A piece of a logical tensor: where it sits and its values.
struct Piece {
  std::string name;
  Eigen::Index row = 0, col = 0;
  Matrix<double> data;
};

// The pieces this rank writes (it is their first holder), cut from its shard. `suffix` names moment tensors.
std::vector<Piece> pieces_to_write(const ModelConfig& config, const ProcessGroups& groups, int rank,
                                   const ModelShard<double>& s, const std::string& suffix, bool with_tables) {
  std::vector<Piece> out;
  const bool stage_writer = groups.rank_in(GroupKind::tp_dp_cp, rank) == 0;
  const bool expert_writer = groups.rank_in(GroupKind::expt_dp, rank) == 0;
  const bool shared_writer = groups.rank_in(GroupKind::dp_cp, rank) == 0;
  auto whole = [&](const std::string& name, const Matrix<double>& m) {
    if (stage_writer && m.size() > 0) out.push_back({name + suffix, 0, 0, m});
  };
  // fc1 slice [gate; up] of width dl at slice index j, fc2 slice of its columns.
  auto swiglu = [&](const std::string& name, const Matrix<double>& fc1, const Matrix<double>& fc2, int j) {
    const auto dl = fc2.cols();
    out.push_back({name + ".fc1.gate" + suffix, j * dl, 0, fc1.topRows(dl)});
    out.push_back({name + ".fc1.up" + suffix, j * dl, 0, fc1.bottomRows(dl)});
    out.push_back({name + ".fc2" + suffix, 0, j * dl, fc2});
  };
  whole("embedding", s.embedding);
  whole("final_norm", s.final_norm);
  whole("head", s.head);
  const ExpertRange experts = groups.experts_of(rank, config.layer.num_experts);
  for (size_t li = 0; li < s.layers.size(); ++li) {
    const std::string pre = "layer" + std::to_string(s.first_layer + static_cast<int>(li)) + ".";
    const LayerShard<double>& layer = s.layers[li];
    whole(pre + "block_norm", s.block_norm[li]);
    whole(pre + "router_weight", layer.router_weight);
    whole(pre + "shared_gate", layer.shared_gate);
    whole(pre + "latent_down", layer.latent_down);
    whole(pre + "latent_up", layer.latent_up);
    if (with_tables) {
      whole(pre + "expert_bias", layer.expert_bias);
      whole(pre + "tid2eid", layer.tid2eid.cast<double>());
    }
    if (expert_writer)
      for (int i = 0; i < experts.count; ++i)
        swiglu(pre + "expert" + std::to_string(experts.first + i), layer.experts.fc1[static_cast<size_t>(i)],
               layer.experts.fc2[static_cast<size_t>(i)], groups.rank_in(GroupKind::expt_tp, rank));
    if (shared_writer && layer.shared_fc1.size() > 0)
      swiglu(pre + "shared", layer.shared_fc1, layer.shared_fc2, groups.rank_in(GroupKind::tp, rank));
  }
  return out;
}

// Every logical tensor a complete checkpoint of this model holds, with its shape and where it goes.
struct Logical {
  std::string name;
  Eigen::Index rows = 0, cols = 0;
  std::function<void(TrainingState&, const Matrix<double>&)> set;
};

// Adds `name` (and, for trained tensors with moments, its .adam_m / .adam_v) for the tensor `get` selects;
// `half` 0/1 takes the gate/up rows of an fc1.
void add_logical(std::vector<Logical>& out, const ModelParams<double>& shape, bool trained, bool moments,
                 const std::string& name, const std::function<Matrix<double>&(ModelParams<double>&)>& get,
                 int half = -1) {
  ModelParams<double> copy = shape;
  const Matrix<double>& m = get(copy);
  if (m.size() == 0) return;
  const Eigen::Index rows = half < 0 ? m.rows() : m.rows() / 2;
  auto setter = [get, half, rows](ModelParams<double>& p, const Matrix<double>& v) {
    Matrix<double>& target = get(p);
    if (half < 0) target = v;
    else target.middleRows(half * rows, rows) = v;
  };
  out.push_back({name, rows, m.cols(), [setter](TrainingState& s, const Matrix<double>& v) { setter(s.params, v); }});
  if (trained && moments) {
    out.push_back({name + ".adam_m", rows, m.cols(), [setter](TrainingState& s, const Matrix<double>& v) { setter(s.adam_m, v); }});
    out.push_back({name + ".adam_v", rows, m.cols(), [setter](TrainingState& s, const Matrix<double>& v) { setter(s.adam_v, v); }});
  }
}

// Vectors are stored as [n, 1] matrices.
void add_vector(std::vector<Logical>& out, Eigen::Index n, bool moments, const std::string& name,
                const std::function<Vector<double>&(ModelParams<double>&)>& get, bool trained = true) {
  if (n == 0) return;
  out.push_back({name, n, 1, [get](TrainingState& s, const Matrix<double>& v) { get(s.params) = v; }});
  if (trained && moments) {
    out.push_back({name + ".adam_m", n, 1, [get](TrainingState& s, const Matrix<double>& v) { get(s.adam_m) = v; }});
    out.push_back({name + ".adam_v", n, 1, [get](TrainingState& s, const Matrix<double>& v) { get(s.adam_v) = v; }});
  }
}

std::vector<Logical> catalogue(const ModelConfig& c, const ModelParams<double>& shape, bool moments) {
  std::vector<Logical> out;
  using P = ModelParams<double>;
  add_logical(out, shape, true, moments, "embedding", [](P& p) -> Matrix<double>& { return p.embedding; });
  add_logical(out, shape, true, moments, "head", [](P& p) -> Matrix<double>& { return p.head; });
  add_vector(out, shape.final_norm.size(), moments, "final_norm", [](P& p) -> Vector<double>& { return p.final_norm; });
  for (int l = 0; l < c.num_layers; ++l) {
    const auto li = static_cast<size_t>(l);
    const std::string pre = "layer" + std::to_string(l) + ".";
    const MoeParams<double>& layer = shape.layers[li];
    add_vector(out, shape.block_norm[li].size(), moments, pre + "block_norm",
               [li](P& p) -> Vector<double>& { return p.block_norm[li]; });
    add_vector(out, layer.expert_bias.size(), moments, pre + "expert_bias",
               [li](P& p) -> Vector<double>& { return p.layers[li].expert_bias; }, false);
    if (layer.tid2eid.size() > 0)
      out.push_back({pre + "tid2eid", layer.tid2eid.rows(), layer.tid2eid.cols(),
                     [li](TrainingState& s, const Matrix<double>& v) { s.params.layers[li].tid2eid = v.cast<std::int64_t>(); }});
    add_logical(out, shape, true, moments, pre + "router_weight", [li](P& p) -> Matrix<double>& { return p.layers[li].router_weight; });
    add_logical(out, shape, true, moments, pre + "shared_gate", [li](P& p) -> Matrix<double>& { return p.layers[li].shared_gate; });
    add_logical(out, shape, true, moments, pre + "latent_down", [li](P& p) -> Matrix<double>& { return p.layers[li].latent_down; });
    add_logical(out, shape, true, moments, pre + "latent_up", [li](P& p) -> Matrix<double>& { return p.layers[li].latent_up; });
    for (int half : {0, 1})
      add_logical(out, shape, true, moments, pre + "shared.fc1." + (half ? "up" : "gate"),
                  [li](P& p) -> Matrix<double>& { return p.layers[li].shared_fc1; }, half);
    add_logical(out, shape, true, moments, pre + "shared.fc2", [li](P& p) -> Matrix<double>& { return p.layers[li].shared_fc2; });
    for (int e = 0; e < c.layer.num_experts; ++e) {
      const auto ei = static_cast<size_t>(e);
      const std::string ex = pre + "expert" + std::to_string(e);
      for (int half : {0, 1})
        add_logical(out, shape, true, moments, ex + ".fc1." + (half ? "up" : "gate"),
                    [li, ei](P& p) -> Matrix<double>& { return p.layers[li].expert_fc1[ei]; }, half);
      add_logical(out, shape, true, moments, ex + ".fc2", [li, ei](P& p) -> Matrix<double>& { return p.layers[li].expert_fc2[ei]; });
    }
  }
  return out;
}

}  // namespace

void save_checkpoint(const std::string& dir, Communicator& world, const ModelConfig& config,
                     const ProcessGroups& groups, ModelShard<double>& params, const ShardMoments& moments,
                     int training_step) {
  const int rank = world.rank();
  if (rank == 0) fs::create_directories(dir);
  world.barrier();
  std::vector<Piece> pieces = pieces_to_write(config, groups, rank, params, "", true);
  if (!moments.m.empty()) {
    // Moments have the shard's trained-tensor shapes: lay them out as a shard and cut them the same way.
    for (const auto* which : {&moments.m, &moments.v}) {
      ModelShard<double> state = params;
      auto tensors = shard_tensors(state, 0);
      for (size_t i = 0; i < tensors.size(); ++i) std::copy((*which)[i].begin(), (*which)[i].end(), tensors[i].data);
      auto more = pieces_to_write(config, groups, rank, state, which == &moments.m ? ".adam_m" : ".adam_v", false);
      pieces.insert(pieces.end(), more.begin(), more.end());
    }
  }
  json fragment = json::array();
  for (const Piece& p : pieces) {
    const std::string file = p.name + "." + std::to_string(p.row) + "_" + std::to_string(p.col) + ".bin";
    std::ofstream out(fs::path(dir) / file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(p.data.data()), static_cast<std::streamsize>(p.data.size() * 8));
    if (!out) fail("cannot write " + (fs::path(dir) / file).string());
    fragment.push_back({{"tensor", p.name}, {"file", file}, {"offset", {p.row, p.col}},
                        {"shape", {p.data.rows(), p.data.cols()}}, {"fnv1a", fnv1a(p.data.data(), p.data.size())}});
  }
  std::ofstream(fs::path(dir) / ("pieces.rank" + std::to_string(rank) + ".json")) << fragment.dump();
  world.barrier();
  if (rank == 0) {
    json all = json::array();
    for (int r = 0; r < world.size(); ++r) {
      const fs::path f = fs::path(dir) / ("pieces.rank" + std::to_string(r) + ".json");
      json part = json::parse(std::ifstream(f));
      for (auto& p : part) all.push_back(p);
      fs::remove(f);
    }
    const json meta{{"format", kFormat},
                    {"written_by", std::string("moe-oracle ") + MOE_ORACLE_VERSION},  // informational
                    {"model", model_json(config)},
                    {"training_step", training_step},
                    {"optimizer_step", moments.step},
                    {"has_moments", !moments.m.empty()},
                    {"pieces", all}};
    std::ofstream(fs::path(dir) / "checkpoint.json") << meta.dump(1);
  }
  world.barrier();
}

TrainingState load_checkpoint(const std::string& dir, const ModelConfig& config) {
  const fs::path meta_path = fs::path(dir) / "checkpoint.json";
  if (!fs::exists(meta_path)) fail("no checkpoint.json in " + dir);
  json meta;
  try {
    meta = json::parse(std::ifstream(meta_path));
    if (meta.value("format", std::string()) != kFormat)
      fail("format '" + meta.value("format", std::string("?")) + "' is not " + kFormat);
    if (meta.at("model") != model_json(config))
      fail("it was written for another model; differences: " + json::diff(model_json(config), meta.at("model")).dump());

    TrainingState state;
    state.params = random_model_params<double>(config, 0);  // the shapes; every value is overwritten below
    state.has_moments = meta.at("has_moments").get<bool>();
    state.optimizer_step = meta.at("optimizer_step").get<int>();
    state.training_step = meta.at("training_step").get<int>();
    if (state.has_moments) state.adam_m = state.adam_v = state.params;

    std::map<std::string, Logical> expected;
    for (Logical& l : catalogue(config, state.params, state.has_moments)) expected.emplace(l.name, std::move(l));
    std::map<std::string, std::pair<Matrix<double>, Eigen::MatrixXi>> assembled;
    for (const auto& [name, l] : expected)
      assembled[name] = {Matrix<double>::Zero(l.rows, l.cols), Eigen::MatrixXi::Zero(l.rows, l.cols)};

    for (const json& p : meta.at("pieces")) {
      const std::string name = p.at("tensor"), file = p.at("file");
      const Eigen::Index r0 = p.at("offset")[0], c0 = p.at("offset")[1];
      const Eigen::Index rows = p.at("shape")[0], cols = p.at("shape")[1];
      auto it = assembled.find(name);
      if (it == assembled.end()) fail("piece " + file + " belongs to '" + name + "', which this model does not have");
      auto& [value, cover] = it->second;
      if (r0 < 0 || c0 < 0 || r0 + rows > value.rows() || c0 + cols > value.cols())
        fail("piece " + file + " lies outside " + name);
      std::ifstream in(fs::path(dir) / file, std::ios::binary | std::ios::ate);
      if (!in) fail("missing piece file " + file);
      if (in.tellg() != static_cast<std::streamoff>(rows * cols * 8))
        fail("piece file " + file + " has " + std::to_string(static_cast<long long>(in.tellg())) +
             " bytes, expected " + std::to_string(rows * cols * 8) + " (truncated or corrupt)");
      Matrix<double> data(rows, cols);
      in.seekg(0);
      in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(rows * cols * 8));
      if (fnv1a(data.data(), data.size()) != p.at("fnv1a").get<std::uint64_t>())
        fail("piece file " + file + " is corrupt (checksum mismatch)");
      value.block(r0, c0, rows, cols) = data;
      cover.block(r0, c0, rows, cols).array() += 1;
    }
    for (auto& [name, vc] : assembled) {
      if (vc.second.minCoeff() < 1) fail("tensor " + name + " is not fully covered by its pieces");
      if (vc.second.maxCoeff() > 1) fail("tensor " + name + " has overlapping pieces");
      expected.at(name).set(state, vc.first);
    }
    return state;
  } catch (const json::exception& e) {
    fail("checkpoint.json is malformed: " + std::string(e.what()));
  }
}

}  // namespace moe::dist
