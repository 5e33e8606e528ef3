#include "compare/dump.hpp"

#include "golden/case_json.hpp"

#include <nlohmann/json.hpp>

#include <bit>
#include <cstring>
#include <fstream>
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

// bfloat16 bits -> the float they encode (the upper half of an IEEE binary32).
double bfloat16_value(std::int64_t bits) {
  const std::uint32_t word = static_cast<std::uint32_t>(bits) << 16;
  return static_cast<double>(std::bit_cast<float>(word));
}

}  // namespace

Tolerance tolerance_of(const std::string& precision) {
  for (Precision p : {Precision::float64, Precision::float32, Precision::bfloat16})
    if (precision == to_string(p)) return tolerance(Compared::foreign_dump, p);
  throw DumpError("dump.json: 'precision' must be float64, float32 or bfloat16, not '" + precision + "'");
}

std::vector<double> RankDump::values(const std::string& name, const std::vector<std::int64_t>& shape) const {
  const auto it = files.find(name);
  if (it == files.end()) fail(dir, "no tensor '" + name + "'");
  golden::NpyArray a;
  try {
    a = golden::read_npy_widened(it->second);
  } catch (const golden::NpyError& e) {
    throw DumpError(e.what());
  }
  bool fits = a.shape.size() == shape.size();
  for (size_t i = 0; fits && i < shape.size(); ++i) fits = shape[i] < 0 || a.shape[i] == shape[i];
  if (!fits) {
    std::string want = "[";
    for (size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + (shape[i] < 0 ? "*" : std::to_string(shape[i]));
    fail(it->second, "shape " + a.shape_string() + ", expected " + want + "]");
  }
  if (a.dtype == golden::NpyDtype::u2) {
    std::vector<double> out;
    out.reserve(a.integers.size());
    for (auto bits : a.integers) out.push_back(bfloat16_value(bits));
    return out;
  }
  return a.as_doubles();
}

Dump read_dump(const std::filesystem::path& dir, const std::string& semantics) {
  const std::filesystem::path meta_path = dir / "dump.json";
  std::ifstream in(meta_path);
  if (!in) fail(meta_path, "cannot open (a dump folder holds dump.json and rank0/, rank1/, …)");
  json meta;
  try {
    meta = json::parse(in);
  } catch (const json::exception& e) {
    fail(meta_path, std::string("not JSON: ") + e.what());
  }
  if (!meta.is_object()) fail(meta_path, "must be a JSON object");
  static const std::set<std::string> known{"format",    "producer", "config",   "semantics",       "layout", "shape",
                                           "dtype",     "precision", "dispatcher", "replay_capacity", "loss", "notes"};
  for (const auto& [key, value] : meta.items())
    if (!known.count(key)) fail(meta_path, "unknown key '" + key + "' (free-form facts go under \"notes\")");
  const json& format = member(meta, "format", meta_path);
  if (format != kFormat) fail(meta_path, "format " + format.dump() + " is not " + kFormat);
  if (meta.contains("loss") && meta["loss"] != kLoss)
    fail(meta_path, "loss " + meta["loss"].dump() + ": the only convention compared is \"" + kLoss + "\"");

  Dump d;
  d.dir = dir;
  try {
    d.config = golden::config_from_json(member(meta, "config", meta_path));
  } catch (const std::exception& e) {
    fail(meta_path, std::string("config: ") + e.what());
  }
  const std::string claimed = meta.value("semantics", std::string("intended"));
  try {
    d.config.semantics = Semantics::parse(semantics.empty() ? claimed : semantics);
  } catch (const std::invalid_argument& e) {
    fail(meta_path, std::string("semantics: ") + e.what());
  }

  const json& layout = member(meta, "layout", meta_path);
  if (!layout.is_object()) fail(meta_path, "'layout' must be an object");
  for (const auto& [key, value] : layout.items()) {
    if (key == "order") {
      d.layout.order = value.get<std::string>();
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
  } catch (const std::invalid_argument& e) {
    fail(meta_path, std::string("layout: ") + e.what());
  }
  const json& shape = member(meta, "shape", meta_path);
  d.seq = positive(member(shape, "seq", meta_path), "shape.seq", meta_path);
  d.batch = positive(member(shape, "batch", meta_path), "shape.batch", meta_path);
  if (d.seq % d.layout.tp != 0) fail(meta_path, "shape.seq must divide by tp (sequence parallelism)");

  d.dtype = member(meta, "dtype", meta_path).get<std::string>();
  if (d.dtype != "float64" && d.dtype != "float32" && d.dtype != "bfloat16")
    fail(meta_path, "'dtype' must be float64, float32 or bfloat16");
  d.precision = meta.value("precision", d.dtype);
  d.tolerance = tolerance_of(d.precision);
  d.dispatcher = meta.value("dispatcher", std::string("unknown"));
  d.producer = meta.value("producer", std::string("unknown"));
  d.replay_capacity = meta.value("replay_capacity", false);
  if (d.replay_capacity && !d.config.capacity_factor) fail(meta_path, "replay_capacity without a capacity_factor");

  for (int r = 0; r < d.layout.world; ++r) {
    RankDump rank;
    rank.rank = r;
    rank.dir = dir / ("rank" + std::to_string(r));
    if (!std::filesystem::is_directory(rank.dir)) fail(rank.dir, "missing (the layout has " +
                                                                std::to_string(d.layout.world) + " ranks)");
    for (const auto& entry : std::filesystem::directory_iterator(rank.dir)) {
      if (entry.path().extension() != ".npy") continue;
      if (!entry.is_regular_file()) fail(entry.path(), "is not a regular file");
      rank.files[entry.path().stem().string()] = entry.path();
    }
    d.ranks.push_back(std::move(rank));
  }
  if (std::filesystem::exists(dir / ("rank" + std::to_string(d.layout.world))))
    fail(dir, "has more rank folders than the layout's world of " + std::to_string(d.layout.world));
  return d;
}

}  // namespace moe::compare
