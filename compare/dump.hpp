// A per-rank dump of one MoE layer's forward and backward from another framework (format `moe-dump/1`,
// compare/README.md): dump.json with the layer's config, the semantics it claims, its layout and batch shape, and
// one folder per rank of .npy tensors under Megatron-Core's parameter names. What is present is compared; what is
// absent is listed. Everything read is checked: a malformed dump is refused with one line naming the file and the
// problem (DumpError).
#pragma once

#include "golden/npy.hpp"
#include "reference/config.hpp"
#include "reference/parallel_layout.hpp"
#include "reference/tolerance.hpp"

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace moe::compare {

class DumpError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// How exactly the dump's numbers can match the double oracle, from the precision its framework computed in
// ("float64", "float32", "bfloat16"): the foreign-dump row of reference/tolerance.hpp.
Tolerance tolerance_of(const std::string& precision);

struct RankDump {
  int rank = 0;
  std::filesystem::path dir;
  std::map<std::string, std::filesystem::path> files;  // tensor name -> .npy path (name = file stem)

  bool has(const std::string& name) const { return files.count(name) > 0; }
  // The tensor widened to double (bfloat16 stored as 16-bit words decoded); throws DumpError when absent or when
  // its shape is not `shape` (-1 = any extent).
  std::vector<double> values(const std::string& name, const std::vector<std::int64_t>& shape) const;
};

struct Dump {
  std::filesystem::path dir;
  MoeConfig config;            // semantics included
  ParallelLayout layout;       // world, tp, ep, etp (cp = pp = 1)
  int seq = 0, batch = 0;      // per data-parallel replica: S positions × B sequences
  std::string dtype;           // of the arrays: float64, float32 or bfloat16
  std::string precision;       // the framework's arithmetic: decides the tolerance
  std::string dispatcher;      // informational
  std::string producer;
  bool replay_capacity = false;  // take the capacity decisions from router.routing_map
  std::vector<RankDump> ranks;   // one per rank, rank order
  Tolerance tolerance;
};

// Reads and validates dump.json and lists every rank folder's tensors. `semantics` (non-empty) overrides the
// dump's own claim.
Dump read_dump(const std::filesystem::path& dir, const std::string& semantics = "");

}  // namespace moe::compare
