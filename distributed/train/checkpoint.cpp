#include "distributed/train/checkpoint.hpp"

#include "reference/config_fields.hpp"
#include "reference/memory_estimate.hpp"
#include "reference/process_groups.hpp"
#include "storage/durable_files.hpp"
#include "storage/staged_directory.hpp"

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>

namespace moe::dist {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr const char* kFormat = "moe-checkpoint/1";

// Every refusal quotes what checkpoint.json and the folder hold (tensor and file names, strings): control characters
// in them are written as \xNN (storage::one_line), so that a file cannot break or forge the line it is quoted in.
[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("checkpoint: " + storage::one_line(what)); }

std::uint64_t fnv1a(const double* data, Eigen::Index n) {
  std::uint64_t h = 1469598103934665603ULL;
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  for (size_t i = 0; i < static_cast<size_t>(n) * sizeof(double); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
  return h;
}

// The model the checkpoint belongs to: its layer by the golden format's keys (reference/config_fields.hpp, so that
// `checkpoint verify` reads it with the golden reader), the semantics the optimizer state was built under, and the
// model around the layer.
json model_json(const ModelConfig& m) {
  json j = fields_json<json>(m.layer);
  j["semantics"] = m.layer.semantics.spec();
  j["num_layers"] = m.num_layers;
  j["n_hash_layers"] = m.n_hash_layers;
  j["vocab"] = m.vocab;
  j["rms_eps"] = m.rms_eps;
  if (m.mtp_depth > 0) {  // only with MTP, likewise
    j["mtp_depth"] = m.mtp_depth;
    j["mtp_loss_scale"] = m.mtp_loss_scale;
  }
  // Only with attention, so that checkpoints of models without it read as they always did.
  if (m.has_attention()) j["attention"] = fields_json<json>(m.attention);
  return j;
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
  // GTP peers hold the same whole tensors once the step has gathered them: one of them writes.
  const bool expert_writer = groups.rank_in(GroupKind::expt_dp_gtp, rank) == 0;
  const bool shared_writer = groups.rank_in(GroupKind::dp_cp_gtp, rank) == 0;
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
  // One block under `pre`: its norms and router whole, its experts by ETP, its shared expert and heads by TP.
  auto block = [&](const std::string& pre, const Vector<double>& block_norm, const LayerShard<double>& layer,
                   const Vector<double>* attention_norm, const AttentionWeights<double>* a) {
    whole(pre + "block_norm", block_norm);
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
    if (a != nullptr) {
      // This TP rank's heads: rows of wq, wk, wv and columns of wo.
      whole(pre + "attention_norm", *attention_norm);
      const int j = groups.rank_in(GroupKind::tp, rank);
      if (shared_writer) {
        out.push_back({pre + "attention_wq" + suffix, j * a->wq.rows(), 0, a->wq});
        out.push_back({pre + "attention_wk" + suffix, j * a->wk.rows(), 0, a->wk});
        out.push_back({pre + "attention_wv" + suffix, j * a->wv.rows(), 0, a->wv});
        out.push_back({pre + "attention_wo" + suffix, 0, j * a->wo.cols(), a->wo});
      }
    }
  };
  const bool attention = config.has_attention();
  for (size_t li = 0; li < s.layers.size(); ++li)
    block("layer" + std::to_string(s.layer_id(li)) + ".", s.block_norm[li], s.layers[li],
          attention ? &s.attention_norm[li] : nullptr, attention ? &s.attention[li] : nullptr);
  for (size_t k = 0; k < s.mtp.size(); ++k) {
    const MtpShard<double>& m = s.mtp[k];
    const std::string pre = config.block_prefix(config.num_layers + static_cast<int>(k));
    whole(pre + "enorm", m.own.enorm);
    whole(pre + "hnorm", m.own.hnorm);
    whole(pre + "eh_proj", m.own.eh_proj);
    whole(pre + "final_norm", m.own.final_norm);
    block(pre, m.block_norm, m.layer, attention ? &m.attention_norm : nullptr, attention ? &m.attention : nullptr);
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
  // `get` only selects a tensor (the same selector writes it on load): reading its shape through it writes
  // nothing, so no copy of the whole model per tensor.
  const Matrix<double>& m = get(const_cast<ModelParams<double>&>(shape));
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
  for (int l = 0; l < c.num_blocks(); ++l) {
    const auto li = static_cast<size_t>(l);
    const std::string pre = c.block_prefix(l);
    const MoeParams<double>& layer = shape.layers[li];
    if (l >= c.num_layers) {  // an MTP depth's own tensors
      const size_t k = li - static_cast<size_t>(c.num_layers);
      add_vector(out, shape.mtp[k].enorm.size(), moments, pre + "enorm", [k](P& p) -> Vector<double>& { return p.mtp[k].enorm; });
      add_vector(out, shape.mtp[k].hnorm.size(), moments, pre + "hnorm", [k](P& p) -> Vector<double>& { return p.mtp[k].hnorm; });
      add_logical(out, shape, true, moments, pre + "eh_proj", [k](P& p) -> Matrix<double>& { return p.mtp[k].eh_proj; });
      add_vector(out, shape.mtp[k].final_norm.size(), moments, pre + "final_norm",
                 [k](P& p) -> Vector<double>& { return p.mtp[k].final_norm; });
    }
    add_vector(out, shape.block_norm[li].size(), moments, pre + "block_norm",
               [li](P& p) -> Vector<double>& { return p.block_norm[li]; });
    if (c.has_attention()) {
      add_vector(out, shape.attention_norm[li].size(), moments, pre + "attention_norm",
                 [li](P& p) -> Vector<double>& { return p.attention_norm[li]; });
      add_logical(out, shape, true, moments, pre + "attention_wq", [li](P& p) -> Matrix<double>& { return p.attention[li].wq; });
      add_logical(out, shape, true, moments, pre + "attention_wk", [li](P& p) -> Matrix<double>& { return p.attention[li].wk; });
      add_logical(out, shape, true, moments, pre + "attention_wv", [li](P& p) -> Matrix<double>& { return p.attention[li].wv; });
      add_logical(out, shape, true, moments, pre + "attention_wo", [li](P& p) -> Matrix<double>& { return p.attention[li].wo; });
    }
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


// What a folder may hold for save_checkpoint to replace it: a previous checkpoint's files (and a fragment list left
// by a writer that did not finish), regular files only.
bool is_checkpoint_file(const fs::directory_entry& entry) {
  if (!fs::is_regular_file(entry.symlink_status())) return false;
  const std::string name = entry.path().filename().string();
  return name == "checkpoint.json" || entry.path().extension() == ".bin" ||
         (name.rfind("pieces.rank", 0) == 0 && entry.path().extension() == ".json");
}

std::string_view bytes_of(const Matrix<double>& m) {
  if (m.size() == 0) return {};
  return {reinterpret_cast<const char*>(m.data()), static_cast<size_t>(m.size()) * sizeof(double)};
}

// Ends a phase of a collective write: every rank learns whether some rank failed, and the first failing rank's
// message (it travels as int64 character codes), so that all throw the same line together and none is left waiting
// in a later collective. `error` is empty on a rank that did not fail.
void throw_if_any_failed(Communicator& world, const std::string& error) {
  std::vector<std::int64_t> first{error.empty() ? world.size() : world.rank()};
  world.allreduce<std::int64_t>(first, ReduceOp::min);
  if (first[0] == world.size()) return;
  const int root = static_cast<int>(first[0]);
  std::vector<std::int64_t> length{static_cast<std::int64_t>(error.size())};
  world.broadcast<std::int64_t>(length, root);
  std::vector<std::int64_t> text(static_cast<size_t>(length[0]));
  if (world.rank() == root)
    for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<unsigned char>(error[i]);
  world.broadcast<std::int64_t>(text, root);
  std::string message;
  for (const std::int64_t c : text) message += static_cast<char>(c);
  fail(message);
}

// An exception's message, never empty (an empty one would read as success in throw_if_any_failed).
std::string message_of(const std::exception& e) {
  const std::string what = e.what();
  return what.empty() ? "an error without a message" : what;
}

// The shortest text that reads back as `v` ("nan", "-inf", "1.5", "4").
std::string number(double v) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return {buf, r.ptr};
}

// checkpoint.json is untrusted: every value is checked for its JSON type and range before it is used, and every
// refusal is one line "checkpoint: <file>: <rule>".
class MetaReader {
 public:
  explicit MetaReader(std::string origin) : origin_(std::move(origin)) {}

  [[noreturn]] void refuse(const std::string& rule) const { fail(origin_ + ": " + rule); }

  const json& at(const json& object, const std::string& key, const std::string& where = "") const {
    if (!object.is_object()) refuse(where + "must be a JSON object");
    const auto it = object.find(key);
    if (it == object.end()) refuse(where + "'" + key + "' is missing");
    return *it;
  }
  std::string string(const json& object, const std::string& key, const std::string& where = "") const {
    const json& v = at(object, key, where);
    if (!v.is_string()) refuse(where + "'" + key + "' must be a string");
    return v.get<std::string>();
  }
  bool boolean(const json& object, const std::string& key) const {
    const json& v = at(object, key);
    if (!v.is_boolean()) refuse("'" + key + "' must be true or false");
    return v.get<bool>();
  }
  // A JSON integer (not 3.7, not 5.0, not "5") in [0, max]; unsigned so that huge values cannot wrap.
  static bool integer_up_to(const json& v, std::uint64_t max, std::uint64_t& out) {
    if (v.is_number_unsigned()) out = v.get<std::uint64_t>();
    else if (v.is_number_integer() && v.get<std::int64_t>() >= 0)
      out = static_cast<std::uint64_t>(v.get<std::int64_t>());
    else return false;
    return out <= max;
  }
  int step(const json& meta, const std::string& key) const {
    constexpr std::uint64_t kMax = 2147483647;  // the int of TrainingState, never negative
    std::uint64_t v = 0;
    if (!integer_up_to(at(meta, key), kMax, v))
      refuse("'" + key + "' must be an integer in [0, 2147483647], not " + at(meta, key).dump());
    return static_cast<int>(v);
  }
  // "offset" [row, col] or "shape" [rows, cols]: two integers >= 0 (their fit in the tensor is checked later).
  std::pair<std::uint64_t, std::uint64_t> pair(const json& piece, const std::string& key, const std::string& names,
                                               const std::string& where) const {
    const json& v = at(piece, key, where);
    std::uint64_t a = 0, b = 0;
    if (!v.is_array() || v.size() != 2 || !integer_up_to(v[0], UINT64_MAX, a) || !integer_up_to(v[1], UINT64_MAX, b))
      refuse(where + "'" + key + "' must be " + names + ", two integers >= 0, not " + v.dump());
    return {a, b};
  }

 private:
  std::string origin_;
};

bool is_id_table(const std::string& tensor) {
  return tensor.size() >= 8 && tensor.compare(tensor.size() - 8, 8, ".tid2eid") == 0;
}

// A tid2eid row sends its token to k distinct experts: a row naming one twice would route the token to that
// expert twice, which no model's table does and the layer refuses (reference/layer_validation.cpp). Checked on the
// assembled table, as a row could in principle arrive in several pieces. "" when every row is distinct, else the
// first offending row, named. The entries are expert ids already (check_values): small integers.
std::string repeated_expert(const Matrix<double>& table) {
  for (Eigen::Index v = 0; v < table.rows(); ++v)
    for (Eigen::Index j = 1; j < table.cols(); ++j)
      for (Eigen::Index i = 0; i < j; ++i)
        if (table(v, i) == table(v, j))
          return "row " + std::to_string(v) + " (token id " + std::to_string(v) + ") names expert " +
                 number(table(v, j)) + " twice (columns " + std::to_string(i) + " and " + std::to_string(j) + ")";
  return "";
}

// The values of one piece of `tensor`, read from `file`: finite, second moments >= 0, tid2eid entries expert ids.
void check_values(const Matrix<double>& data, const std::string& tensor, const fs::path& file, int num_experts) {
  const bool ids = is_id_table(tensor);
  const bool second_moment = tensor.size() >= 7 && tensor.compare(tensor.size() - 7, 7, ".adam_v") == 0;
  // The message is built only for a bad element: building it for every element was 17% of a resumed run.
  const auto element = [&](Eigen::Index k, double v) {
    return file.string() + ": element " + std::to_string(k) + " of " + tensor + " is " + number(v);
  };
  for (Eigen::Index k = 0; k < data.size(); ++k) {
    const double v = data.data()[k];
    if (ids && !(v >= 0 && v < num_experts && v == std::floor(v)))
      fail(element(k, v) + ", not an expert id in [0, " + std::to_string(num_experts) + ")");
    if (!std::isfinite(v)) fail(element(k, v) + " (values must be finite)");
    if (second_moment && v < 0) fail(element(k, v) + ", but second moments are >= 0");
  }
}

}  // namespace

void save_checkpoint(const std::string& dir, Communicator& world, const ModelConfig& config,
                     const ProcessGroups& groups, ModelShard<double>& params, const ShardMoments& moments,
                     int training_step) {
  // The whole folder appears at once (storage/staged_directory.hpp): rank 0 makes a staging folder beside `dir`,
  // every rank writes its pieces into it, rank 0 writes checkpoint.json and swaps the folder into place. Each
  // phase ends in throw_if_any_failed, so that all ranks throw together (and rank 0's StagedDirectory removes the
  // staging folder, leaving `dir` as it was) rather than some waiting forever.
  const int rank = world.rank();
  std::unique_ptr<storage::StagedDirectory> staged;
  std::string error;
  std::vector<std::int64_t> id{0, 0};  // the staging folder's StagedDirectory::Id, chosen by rank 0
  if (rank == 0) {
    try {
      staged = std::make_unique<storage::StagedDirectory>(dir, is_checkpoint_file, "checkpoint");
      id = {staged->id().pid, staged->id().serial};
    } catch (const std::exception& e) {
      error = message_of(e);
    }
  }
  throw_if_any_failed(world, error);
  world.broadcast<std::int64_t>(id, 0);
  const fs::path staging =
      storage::StagedDirectory::staging_path(storage::StagedDirectory::resolve_target(dir), {id[0], id[1]});

  try {
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
      storage::write_file_synced(staging / file, bytes_of(p.data));
      fragment.push_back({{"tensor", p.name}, {"file", file}, {"offset", {p.row, p.col}},
                          {"shape", {p.data.rows(), p.data.cols()}}, {"fnv1a", fnv1a(p.data.data(), p.data.size())}});
    }
    storage::write_file_synced(staging / ("pieces.rank" + std::to_string(rank) + ".json"), fragment.dump());
  } catch (const std::exception& e) {
    error = message_of(e);
  }
  throw_if_any_failed(world, error);

  if (rank == 0) {
    try {
      json all = json::array();
      for (int r = 0; r < world.size(); ++r) {
        const fs::path f = staging / ("pieces.rank" + std::to_string(r) + ".json");
        for (auto& p : json::parse(storage::RegularFile(f).read_all())) all.push_back(p);
        fs::remove(f);
      }
      json meta{{"format", kFormat},
                {"written_by", std::string("moe-oracle ") + MOE_ORACLE_VERSION},  // informational
                {"model", model_json(config)},
                {"training_step", training_step},
                {"optimizer_step", moments.step},
                {"has_moments", !moments.m.empty()},
                {"pieces", all}};
      if (!moments.m.empty()) meta["moments"] = to_string(moments.kind);  // adam or muon
      storage::write_file_synced(staging / "checkpoint.json", meta.dump(1));  // last: it lists the pieces
      staged->commit();
    } catch (const std::exception& e) {
      error = message_of(e);
    }
  }
  throw_if_any_failed(world, error);  // also the end of the write on every rank: the folder is in place
}

TrainingState load_checkpoint(const std::string& dir, const ModelConfig& config) {
  const fs::path folder(dir);
  const fs::path meta_path = folder / "checkpoint.json";
  try {
    // A writer without RENAME_EXCHANGE killed between its two renames left the folder missing and the previous
    // checkpoint complete beside it: it is put back (storage/write_leftovers.hpp).
    storage::StagedDirectory::recover(folder);
  } catch (const storage::StorageError& e) {
    fail(e.what());
  }
  if (storage::file_kind(meta_path, false) == "missing") fail("no checkpoint.json in " + dir);
  const MetaReader read(meta_path.string());
  try {
    json meta;
    try {
      meta = json::parse(storage::RegularFile(meta_path).read_all());
    } catch (const json::parse_error& e) {
      read.refuse(std::string("invalid JSON: ") + e.what());
    }
    if (!meta.is_object()) read.refuse("must hold a JSON object");
    if (const std::string format = read.string(meta, "format"); format != kFormat)
      read.refuse("format '" + format + "' is not " + kFormat);
    if (read.at(meta, "model") != model_json(config))
      read.refuse("it was written for another model; differences: " +
                  json::diff(model_json(config), meta.at("model")).dump());

    TrainingState state;
    state.has_moments = read.boolean(meta, "has_moments");
    // Everything allocated below is sized by the model, which `checkpoint verify` takes from this untrusted file:
    // estimated first and held to the one memory budget, so that a declared 2^62 elements is a refusal, not an
    // allocation (reference/memory_estimate.hpp).
    try {
      require_memory(checkpoint_load_bytes(config, state.has_moments), "loading its model");
    } catch (const std::invalid_argument& e) {
      read.refuse(e.what());
    }
    state.params = random_model_params<double>(config, 0);  // the shapes; every value is overwritten below
    if (meta.contains("moments")) {
      const std::string of = read.string(meta, "moments");
      if (of != "adam" && of != "muon") read.refuse("'moments' must be \"adam\" or \"muon\", not '" + of + "'");
      state.moments_of = parse_optimizer_kind(of);
    }
    state.optimizer_step = read.step(meta, "optimizer_step");
    state.training_step = read.step(meta, "training_step");
    if (state.has_moments) state.adam_m = state.adam_v = state.params;

    std::map<std::string, Logical> expected;
    for (Logical& l : catalogue(config, state.params, state.has_moments)) expected.emplace(l.name, std::move(l));
    std::map<std::string, std::pair<Matrix<double>, Eigen::MatrixXi>> assembled;
    for (const auto& [name, l] : expected)
      assembled[name] = {Matrix<double>::Zero(l.rows, l.cols), Eigen::MatrixXi::Zero(l.rows, l.cols)};

    const json& pieces = read.at(meta, "pieces");
    if (!pieces.is_array()) read.refuse("'pieces' must be an array");
    for (size_t i = 0; i < pieces.size(); ++i) {
      const json& p = pieces[i];
      const std::string where = "piece " + std::to_string(i) + ": ";
      const std::string name = read.string(p, "tensor", where), file = read.string(p, "file", where);
      auto it = assembled.find(name);
      if (it == assembled.end()) read.refuse(where + "'" + name + "' is not a tensor of this model");
      auto& [value, cover] = it->second;
      // Both pairs are >= 0 and compared without sums, so that no value can overflow past the check.
      const auto [r0, c0] = read.pair(p, "offset", "[row, col]", where);
      const auto [rows_u, cols_u] = read.pair(p, "shape", "[rows, cols]", where);
      const auto R = static_cast<std::uint64_t>(value.rows()), C = static_cast<std::uint64_t>(value.cols());
      if (r0 > R || rows_u > R - r0 || c0 > C || cols_u > C - c0)
        read.refuse(where + "offset [" + std::to_string(r0) + ", " + std::to_string(c0) + "] and shape [" +
                    std::to_string(rows_u) + ", " + std::to_string(cols_u) + "] lie outside " + name + " [" +
                    std::to_string(R) + ", " + std::to_string(C) + "]");
      std::uint64_t checksum = 0;
      if (!MetaReader::integer_up_to(read.at(p, "fnv1a", where), UINT64_MAX, checksum))
        read.refuse(where + "'fnv1a' must be an unsigned integer");
      const auto rows = static_cast<Eigen::Index>(rows_u), cols = static_cast<Eigen::Index>(cols_u);

      Matrix<double> data(rows, cols);
      fs::path path;
      try {
        path = storage::confined_file(folder, file, "the checkpoint folder");
        storage::RegularFile in(path);
        const std::uint64_t need = rows_u * cols_u * sizeof(double);  // at most the tensor's size
        if (in.size() != need)
          fail(path.string() + ": has " + std::to_string(in.size()) + " bytes, expected " + std::to_string(need) +
               " for shape [" + std::to_string(rows) + ", " + std::to_string(cols) + "] (truncated or corrupt)");
        in.read(reinterpret_cast<char*>(data.data()), static_cast<size_t>(need));
      } catch (const storage::StorageError& e) {
        read.refuse(where + e.what());
      }
      if (fnv1a(data.data(), data.size()) != checksum) fail(path.string() + ": corrupt (checksum mismatch)");
      check_values(data, name, path, config.layer.num_experts);
      value.block(static_cast<Eigen::Index>(r0), static_cast<Eigen::Index>(c0), rows, cols) = data;
      cover.block(static_cast<Eigen::Index>(r0), static_cast<Eigen::Index>(c0), rows, cols).array() += 1;
    }
    for (auto& [name, vc] : assembled) {
      if (vc.second.minCoeff() < 1) read.refuse("tensor " + name + " is not fully covered by its pieces");
      if (vc.second.maxCoeff() > 1) read.refuse("tensor " + name + " has overlapping pieces");
      if (is_id_table(name))
        if (const std::string repeat = repeated_expert(vc.first); !repeat.empty())
          read.refuse("tensor " + name + ": " + repeat);
      expected.at(name).set(state, vc.first);
    }
    return state;
  } catch (const storage::StorageError& e) {
    fail(e.what());
  } catch (const json::exception& e) {
    read.refuse(std::string("malformed: ") + e.what());
  } catch (const fs::filesystem_error& e) {
    fail(e.what());
  }
}

}  // namespace moe::dist
