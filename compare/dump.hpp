// A per-rank dump of one MoE layer's forward and backward from another framework (format `moe-dump/1`,
// compare/README.md): dump.json with the layer's config, the semantics it claims, its layout and batch shape, and
// one folder per rank of .npy tensors under Megatron-Core's parameter names. What is present is compared; what is
// absent is listed. Everything read is checked before anything is computed: a malformed dump is refused with one
// line naming the file and the problem (DumpError).
//
// What a dump cannot do by itself: loosen its own tolerance. The tolerance follows the precision of its arrays
// (`dtype`, checked against every file), or the precision the user states on the command line (`--precision`);
// dump.json's own `precision` is taken only when it is no looser than its arrays.
#pragma once

#include "formats/npy.hpp"
#include "reference/config.hpp"
#include "reference/moe_layer.hpp"
#include "reference/parallel_layout.hpp"
#include "reference/tolerance.hpp"
#include "storage/durable_files.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moe::compare {

// One line naming the file and the problem; file names and dump.json's values are quoted in it, so every control
// character they hold is written as \xNN (storage::one_line).
class DumpError : public std::runtime_error {
 public:
  explicit DumpError(const std::string& what) : std::runtime_error(storage::one_line(what)) {}
};

struct TensorFile {
  std::filesystem::path path;
  formats::NpyHeader header;  // read and checked against the file's size when the dump is listed
};

struct RankDump {
  int rank = 0;
  std::filesystem::path dir;
  std::map<std::string, TensorFile> files;  // tensor name (= file stem) -> file

  bool has(const std::string& name) const { return files.count(name) > 0; }
  // The tensor widened to double (bfloat16 stored as 16-bit words decoded); throws DumpError when absent or when
  // its shape is not `shape` (-1 = any extent).
  std::vector<double> values(const std::string& name, const std::vector<std::int64_t>& shape) const;
  // The same for an input or a parameter, which must also be finite: a NaN or infinity the oracle would compute
  // with is refused, never judged.
  std::vector<double> input_values(const std::string& name, const std::vector<std::int64_t>& shape) const;
};

struct Dump {
  std::filesystem::path dir;
  MoeConfig config;            // semantics included
  ParallelLayout layout;       // world, tp, ep, etp (cp = pp = 1)
  int seq = 0, batch = 0;      // per data-parallel replica: S positions × B sequences
  Precision dtype = Precision::float64;      // of the layer's arrays (a floating file has it or is wider)
  Precision precision = Precision::float64;  // the arithmetic the tolerance is set for
  std::string precision_from;  // why: "the arrays", "dump.json (no looser than its arrays)", "--precision"
  Precision router_precision = Precision::float64;  // the router's: its weight's dtype, float32 at least below float64
  std::string dispatcher;      // informational
  std::string producer;
  bool replay_capacity = false;  // take the capacity decisions from router.routing_map
  // global_aux statistics of rows outside the dump, pooled with the dump's own (dump.json's aux_pool: transformers'
  // balance loss pools every MoE layer of the model). Unset: the dump's rows are the whole pool.
  std::optional<GlobalAuxGroup> aux_pool;
  std::vector<RankDump> ranks;   // one per rank, rank order
  // A float64 dump's fixed tolerance (reference/tolerance.hpp's foreign-dump row); a float32 or bf16 dump is judged
  // by the error model instead (error_model.hpp), and this is unset.
  std::optional<Tolerance> tolerance;
};

struct ReadOptions {
  std::string semantics;  // non-empty: overrides the dump's claim
  std::optional<Precision> precision;  // set: the user's statement of the framework's arithmetic (sets the tolerance)
};

// Reads and validates dump.json, lists every rank folder's tensors and checks each file's header.
Dump read_dump(const std::filesystem::path& dir, const ReadOptions& options = {});

}  // namespace moe::compare
