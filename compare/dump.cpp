#include "compare/dump.hpp"

#include "compare/dump_names.hpp"
#include "compare/dump_tensors.hpp"
#include "formats/config_json.hpp"
#include "reference/process_groups.hpp"
#include "reference/tolerance_names.hpp"
#include "storage/json_file.hpp"

#include <nlohmann/json.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <set>

namespace moe::compare {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "moe-dump/1";
constexpr const char* kLoss = "sum(output.grad * output) + aux_loss + z_loss";

[[noreturn]] void fail(const std::filesystem::path& where, const std::string& problem) {
  throw DumpError(where.string() + ": " + problem);
}

// `key` as a plain C string: a std::string temporary in the call would make newer compilers warn that the returned
// reference might dangle (-Wdangling-reference), which it does not (it points into `object`).
const json& member(const json& object, const char* key, const std::filesystem::path& where) {
  if (!object.contains(key)) fail(where, std::string("missing key '") + key + "'");
  return object.at(key);
}

int positive(const json& value, const std::string& key, const std::filesystem::path& where) {
  if (!value.is_number_integer() || value.get<long long>() < 1 || value.get<long long>() > (1 << 24))
    fail(where, "'" + key + "' must be a whole number in [1, 2^24]");
  return value.get<int>();
}

std::string text(const json& value, const std::string& key, const std::filesystem::path& where) {
  if (!value.is_string()) fail(where, "'" + key + "' must be a string, not " + std::string(value.type_name()));
  return value.get<std::string>();
}

std::string optional_text(const json& object, const char* key, const std::string& fallback,
                          const std::filesystem::path& where) {
  return object.contains(key) ? text(object.at(key), key, where) : fallback;
}

// The precision a floating .npy array holds: <f8 float64, <f4 float32, bfloat16 words bfloat16.
Precision floating_precision(formats::NpyDtype t) {
  return t == formats::NpyDtype::f8 ? Precision::float64 : t == formats::NpyDtype::f4 ? Precision::float32
                                                                                    : Precision::bfloat16;
}

// A precision named in dump.json (`key`), or the refusal naming the choices.
Precision precision_in(const std::string& name, const char* key, const std::filesystem::path& where) {
  if (const auto p = find_named<Precision>(name)) return *p;
  throw DumpError(where.string() + ": '" + key + "' must be " + name_list<Precision>() + ", not '" + name + "'");
}

bool is_floating(formats::NpyDtype t) {
  return t == formats::NpyDtype::f8 || t == formats::NpyDtype::f4 || t == formats::NpyDtype::u2;
}

// bfloat16 bits -> the float they encode (the upper half of an IEEE binary32).
double bfloat16_value(std::int64_t bits) {
  const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
  return static_cast<double>(std::bit_cast<float>(word));
}

}  // namespace

std::vector<double> RankDump::values(const std::string& name, const std::vector<std::int64_t>& shape) const {
  const auto it = files.find(name);
  if (it == files.end()) fail(dir, "no tensor '" + name + "'");
  const std::filesystem::path& path = it->second.path;
  formats::NpyArray a;
  try {
    a = formats::read_npy_widened(path);
  } catch (const formats::NpyError& e) {
    throw DumpError(e.what());
  }
  bool fits = a.shape.size() == shape.size();
  for (size_t i = 0; fits && i < shape.size(); ++i) fits = shape[i] < 0 || a.shape[i] == shape[i];
  if (!fits) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + (shape[i] < 0 ? "*" : std::to_string(shape[i]));
    fail(path, "shape " + a.shape_string() + ", expected " + want + "]");
  }
  if (a.dtype == formats::NpyDtype::u2) {
    std::vector<double> out;
    out.reserve(a.integers.size());
    for (auto bits : a.integers) out.push_back(bfloat16_value(bits));
    return out;
  }
  return a.as_doubles();
}

std::vector<double> RankDump::input_values(const std::string& name, const std::vector<std::int64_t>& shape) const {
  std::vector<double> v = values(name, shape);
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i]))
      fail(files.at(name).path, "element " + std::to_string(i) + " is " + (std::isnan(v[i]) ? "NaN" : "infinite") +
                                    ": inputs and parameters must be finite (a non-finite input is refused, not "
                                    "judged)");
  return v;
}

namespace {

// rank0/, rank1/, … with each .npy file's header read and checked against the file's size; nothing else named
// rank* may sit beside them.
// The rank a folder name "rank<r>" names, r written without leading zeros; -1 for any other name.
int rank_of_folder(const std::string& name) {
  const std::string digits = name.substr(4);
  if (digits.empty() || digits.size() > 7 || (digits.size() > 1 && digits[0] == '0')) return -1;
  for (char ch : digits)
    if (ch < '0' || ch > '9') return -1;
  return std::stoi(digits);
}

// Returns the narrowest floating dtype any file holds (float64 when none is narrower).
Precision list_ranks(Dump& d) {
  Precision narrowest = Precision::float64;
  for (const auto& entry : std::filesystem::directory_iterator(d.dir)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("rank")) continue;
    const int r = rank_of_folder(name);
    if (r < 0 || r >= d.layout.world)
      fail(entry.path(), "is not a rank of the layout's world of " + std::to_string(d.layout.world) +
                             " (rank0 … rank" + std::to_string(d.layout.world - 1) + ")");
  }
  for (int r = 0; r < d.layout.world; ++r) {
    RankDump rank;
    rank.rank = r;
    rank.dir = d.dir / ("rank" + std::to_string(r));
    if (!std::filesystem::is_directory(rank.dir))
      fail(rank.dir, "missing (the layout has " + std::to_string(d.layout.world) + " ranks)");
    for (const auto& entry : std::filesystem::directory_iterator(rank.dir)) {
      if (entry.path().extension() != ".npy") continue;
      if (!entry.is_regular_file()) fail(entry.path(), "is not a regular file");
      TensorFile file{entry.path(), {}};
      try {
        file.header = formats::read_npy_header_widened(entry.path());
      } catch (const formats::NpyError& e) {
        throw DumpError(e.what());
      }
      const bool floating = is_floating(file.header.dtype);
      // A tensor kept wider than the layer's dtype loses nothing (a bf16 layer's float32 router, its loss scalars
      // as float64): taken, and judged at the dump's tolerance all the same. A narrower one is not what the dump
      // says it is.
      if (floating && looser_than(floating_precision(file.header.dtype), d.dtype))
        fail(entry.path(), "holds " + std::string(formats::npy_descr(file.header.dtype)) + " values, narrower than "
                           "dump.json's dtype " + std::string(to_string(d.dtype)) +
                           " (a floating tensor has the dump's dtype or a wider one)");
      if (floating && looser_than(floating_precision(file.header.dtype), narrowest))
        narrowest = floating_precision(file.header.dtype);
      rank.files[entry.path().stem().string()] = std::move(file);
    }
    d.ranks.push_back(std::move(rank));
  }
  return narrowest;
}

// dump.json's aux_pool: the aux-loss statistics of rows outside the dump that its framework pooled with the dump's
// own (transformers pools every MoE layer's router logits into one balance loss). Counts are per expert, over valid
// rows, as the aux map counts them; statistics, so no gradient flows to those rows.
GlobalAuxGroup read_aux_pool(const json& pool, const MoeConfig& config, const std::filesystem::path& meta_path) {
  if (config.aux_loss_type != AuxLossType::global_aux)
    fail(meta_path, "aux_pool pools statistics into a global_aux loss; config.aux_loss_type is " +
                        std::string(to_string(config.aux_loss_type)));
  if (!pool.is_object()) fail(meta_path, "'aux_pool' must be an object with counts and tokens");
  for (const auto& [key, value] : pool.items())
    if (key != "counts" && key != "tokens" && key != "from")
      fail(meta_path, "unknown key 'aux_pool." + key + "' (aux_pool has counts, tokens and from)");
  const json& counts = member(pool, "counts", meta_path);
  if (!counts.is_array() || counts.size() != static_cast<size_t>(config.num_experts))
    fail(meta_path, "aux_pool.counts must be an array of num_experts (" + std::to_string(config.num_experts) +
                        ") counts");
  const json& tokens = member(pool, "tokens", meta_path);
  if (!tokens.is_number_integer() || tokens.get<std::int64_t>() < 1)
    fail(meta_path, "aux_pool.tokens must be a positive integer (the rows outside the dump)");
  GlobalAuxGroup out;
  out.tokens = static_cast<double>(tokens.get<std::int64_t>());
  double assigned = 0;
  for (const json& c : counts) {
    if (!c.is_number_integer() || c.get<std::int64_t>() < 0)
      fail(meta_path, "aux_pool.counts must be non-negative integers, not " + c.dump());
    out.counts.push_back(static_cast<double>(c.get<std::int64_t>()));
    assigned += out.counts.back();
  }
  // Each valid row assigns topk experts: counts that do not sum to topk·tokens are not an aux map's.
  if (assigned != static_cast<double>(config.topk) * out.tokens)
    fail(meta_path, "aux_pool.counts sum to " + std::to_string(static_cast<std::int64_t>(assigned)) + ", not topk × tokens = " +
                        std::to_string(config.topk) + " × " + tokens.dump());
  return out;
}

}  // namespace

Dump read_dump(const std::filesystem::path& dir, const ReadOptions& options) {
  const std::filesystem::path meta_path = dir / "dump.json";
  if (!std::filesystem::exists(meta_path))
    fail(meta_path, "missing (a dump folder holds dump.json and rank0/, rank1/, …)");
  json meta;
  try {
    meta = storage::read_json_file(meta_path);
  } catch (const storage::StorageError& e) {
    throw DumpError(e.what());
  }
  if (!meta.is_object()) fail(meta_path, "must be a JSON object");
  static const std::set<std::string> known{"format",     "producer",        "config",   "semantics", "layout",
                                           "shape",      "dtype",           "precision", "dispatcher",
                                           "replay_capacity", "aux_pool",  "loss",      "notes"};
  for (const auto& [key, value] : meta.items())
    if (!known.count(key)) fail(meta_path, "unknown key '" + key + "' (free-form facts go under \"notes\")");
  const json& format = member(meta, "format", meta_path);
  if (format != kFormat) fail(meta_path, "format " + format.dump() + " is not " + kFormat);
  if (meta.contains("loss") && meta["loss"] != kLoss)
    fail(meta_path, "loss " + meta["loss"].dump() + ": the only convention compared is \"" + kLoss + "\"");

  Dump d;
  d.dir = dir;
  try {
    d.config = formats::config_from_json(member(meta, "config", meta_path));
  } catch (const std::exception& e) {
    fail(meta_path, std::string("config: ") + e.what());
  }
  const std::string claimed = optional_text(meta, "semantics", "intended", meta_path);
  try {
    d.config.semantics = Semantics::parse(options.semantics.empty() ? claimed : options.semantics);
  } catch (const std::invalid_argument& e) {
    fail(meta_path, std::string("semantics: ") + e.what());
  }

  const json& layout = member(meta, "layout", meta_path);
  if (!layout.is_object()) fail(meta_path, "'layout' must be an object");
  for (const auto& [key, value] : layout.items()) {
    if (key == "order") {
      d.layout.order = text(value, "layout.order", meta_path);
      continue;
    }
    const int size = positive(value, "layout." + key, meta_path);
    if (key == "world") d.layout.world = size;
    else if (key == "tp") d.layout.tp = size;
    else if (key == "ep") d.layout.ep = size;
    else if (key == "etp") d.layout.etp = size;
    else if ((key == "cp" || key == "pp") && size == 1) continue;
    else fail(meta_path, "layout." + key + ": compared layouts have world, tp, ep, etp (cp = pp = 1)");
  }
  try {
    d.layout.validate();
    check_layer_sharding(d.config, d.layout);
  } catch (const std::invalid_argument& e) {
    fail(meta_path, std::string("layout: ") + e.what());
  }
  const json& shape = member(meta, "shape", meta_path);
  if (!shape.is_object()) fail(meta_path, "'shape' must be an object");
  for (const auto& [key, value] : shape.items())
    if (key != "seq" && key != "batch") fail(meta_path, "unknown key 'shape." + key + "' (shape has seq and batch)");
  d.seq = positive(member(shape, "seq", meta_path), "shape.seq", meta_path);
  d.batch = positive(member(shape, "batch", meta_path), "shape.batch", meta_path);
  if (d.seq % d.layout.tp != 0) fail(meta_path, "shape.seq must divide by tp (sequence parallelism)");

  d.dtype = precision_in(text(member(meta, "dtype", meta_path), "dtype", meta_path), "dtype", meta_path);
  const Precision stated =
      precision_in(optional_text(meta, "precision", std::string(to_string(d.dtype)), meta_path), "precision", meta_path);
  d.dispatcher = optional_text(meta, "dispatcher", "unknown", meta_path);
  d.producer = optional_text(meta, "producer", "unknown", meta_path);
  if (meta.contains("replay_capacity")) {
    if (!meta["replay_capacity"].is_boolean()) fail(meta_path, "'replay_capacity' must be true or false");
    d.replay_capacity = meta["replay_capacity"].get<bool>();
  }
  if (d.replay_capacity && !d.config.capacity_factor) fail(meta_path, "replay_capacity without a capacity_factor");
  if (meta.contains("aux_pool")) d.aux_pool = read_aux_pool(meta["aux_pool"], d.config, meta_path);

  Precision narrowest = Precision::float64;
  try {
    narrowest = list_ranks(d);
  } catch (const std::filesystem::filesystem_error& e) {
    fail(e.path1(), e.code().message());
  }
  // The tolerance follows the files: dtype must be what the narrowest array holds (a claim of bfloat16 over float32
  // arrays would loosen the tolerance by the dump's word alone). Then the user's statement, else the dump's own
  // claim when it is no looser than its arrays, else the arrays' precision. A dump alone never loosens it.
  const std::string dtype(to_string(d.dtype)), claim(to_string(stated));
  if (!options.precision && narrowest != d.dtype)
    fail(meta_path, "dtype \"" + dtype + "\" but the narrowest array holds " + std::string(to_string(narrowest)) +
                        " values: the tolerance follows the files; if the framework computed in " + dtype +
                        ", say so with --precision " + dtype);
  if (options.precision) {
    d.precision = *options.precision;
    d.precision_from = "--precision";
  } else if (looser_than(stated, d.dtype)) {
    fail(meta_path, "precision \"" + claim + "\" is looser than the dump's " + dtype + " arrays, and a dump cannot "
                    "loosen its own tolerance: if the framework computed in " + claim + ", say so with --precision " +
                    claim);
  } else {
    d.precision = stated;
    d.precision_from = meta.contains("precision") ? "dump.json" : "the arrays' dtype";
  }
  if (d.precision == Precision::float64) d.tolerance = tolerance(Compared::foreign_dump, Precision::float64);
  // The router's arithmetic: its weight's dtype (a bf16 weight makes bf16 logits), and float32 at least wherever the
  // layer is not computed in float64 (frameworks route in float32).
  const auto router = d.ranks.front().files.find(tensor::kRouterWeight);
  const Precision router_dtype = router == d.ranks.front().files.end() || !is_floating(router->second.header.dtype)
                                     ? d.dtype
                                     : floating_precision(router->second.header.dtype);
  const Precision at_least = d.precision == Precision::float64 ? Precision::float64 : Precision::float32;
  d.router_precision = looser_than(at_least, router_dtype) ? at_least : router_dtype;
  check_dump_tensors(d);
  return d;
}

}  // namespace moe::compare
