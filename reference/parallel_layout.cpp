#include "reference/parallel_layout.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

void require(bool ok, const std::string& rule) {
  if (!ok) throw std::invalid_argument("invalid parallel layout: " + rule);
}

std::string str(int v) { return std::to_string(v); }

}  // namespace

void ParallelLayout::validate() const {
  require(world >= 1, "world must be >= 1");
  // The meshes list every rank: a world beyond this is an accounting question no rank table answers.
  require(world <= kMaxWorld, "world (" + str(world) + ") must be <= " + str(kMaxWorld));
  require(tp >= 1 && cp >= 1 && pp >= 1 && ep >= 1 && etp >= 1 && gtp >= 1 && egtp >= 1,
          "tp, cp, pp, ep, etp, gtp and egtp must be >= 1");
  require(vpp >= 1 && vpp <= 1024, "vpp must be between 1 and 1024");
  require(vpp == 1 || pp > 1, "vpp > 1 (the interleaved pipeline) needs pp > 1");
  require(tp <= world && cp <= world && pp <= world && ep <= world && etp <= world && gtp <= world && egtp <= world,
          "tp, cp, pp, ep, etp, gtp and egtp must each be <= world (" + str(world) + ")");
  // world divisible by each mesh's model axes, the GTP axis named only when it is on. Products in 64 bits of
  // factors <= world <= 2^20: three fit, and the GTP factor multiplies only a product already <= world.
  const auto mesh_rule = [&](long long axes, const std::string& names, int remat, const std::string& remat_name,
                             const std::string& dp_name) {
    const long long product = axes <= world ? axes * remat : axes;
    const std::string all = remat == 1 ? names : names + "·" + remat_name;
    require(product <= world && world % product == 0, "world (" + str(world) + ") must be divisible by " + all +
                                                          " (" + std::to_string(product) + ") so that " + dp_name +
                                                          " = world/(" + all + ")");
  };
  mesh_rule(1LL * tp * cp * pp, "tp·cp·pp", gtp, "gtp", "dp");
  mesh_rule(1LL * etp * ep * pp, "etp·ep·pp", egtp, "egtp", "edp");
  // Order tokens: known, not repeated, and every axis of size > 1 in either mesh named (RankGenerator's rules).
  try {
    dense_mesh();
    expert_mesh();
  } catch (const std::invalid_argument& e) {
    require(false, e.what());
  }
  // Megatron's initialize_model_parallel asserts equal dp sizes of the two meshes unless the order ends in pp
  // (megatron/core/parallel_state.py): otherwise the pp stride would differ between them.
  const bool pp_last = order.size() >= 2 && order.compare(order.size() - 2, 2, "pp") == 0;
  require(pp_last || pp == 1 || dp() == edp(),
          "dp (" + str(dp()) + ") must equal edp (" + str(edp()) + ") unless the order ends in pp");
  // Both generators must agree on the pipeline: a stage is the same set of ranks for attention and experts. The pp
  // group of rank r is {r - c·s + i·s : i < pp} with s the pp stride and c = r/s mod pp, so over one world and one
  // pp size the two meshes have the same pp groups exactly when their pp strides agree (or pp = 1). Checked that
  // way, not by listing the groups: that took 0.3 s at a world of 2^20 (ParallelLayout.PpStrideRuleEqualsListedGroups
  // compares the two on every small layout).
  require(pp == 1 || dense_mesh().stride("pp") == expert_mesh().stride("pp"),
          "the dense and expert meshes must have equal pp groups under order '" + order + "'");
}

namespace {

// `order` with gtp_remat after `anchor` (after tp if the order lacks it; first if it lacks both).
std::string with_gtp_axis(const std::string& order, const std::string& anchor) {
  std::vector<std::string> tokens = parse_order(order);
  if (std::find(tokens.begin(), tokens.end(), "gtp_remat") != tokens.end()) return order;
  auto at = std::find(tokens.begin(), tokens.end(), anchor);
  if (at == tokens.end()) at = std::find(tokens.begin(), tokens.end(), "tp");
  tokens.insert(at == tokens.end() ? tokens.begin() : at + 1, "gtp_remat");
  std::string out;
  for (const auto& t : tokens) out += (out.empty() ? "" : "-") + t;
  return out;
}

}  // namespace

std::string ParallelLayout::dense_order() const { return with_gtp_axis(order, "tp"); }

std::string ParallelLayout::expert_order() const { return with_gtp_axis(order, "ep"); }

RankGenerator ParallelLayout::dense_mesh() const { return RankGenerator(tp, 1, dp(), pp, cp, dense_order(), gtp); }

RankGenerator ParallelLayout::expert_mesh() const {
  return RankGenerator(etp, ep, edp(), pp, 1, expert_order(), egtp);
}

int num_microbatches(const ParallelLayout& layout, int global_batch, int micro_batch) {
  if (global_batch < 1 || micro_batch < 1)
    throw std::invalid_argument("microbatch rule: global_batch and micro_batch must be >= 1");
  const long long per_step = static_cast<long long>(micro_batch) * layout.dp_with_gtp();
  if (global_batch % per_step != 0)
    throw std::invalid_argument("microbatch rule: global_batch (" + str(global_batch) + ") must be divisible by " +
                                (layout.gtp > 1 ? "micro_batch·dp·gtp (" : "micro_batch·dp (") +
                                std::to_string(per_step) + ")");
  return static_cast<int>(global_batch / per_step);
}

ParallelLayout layout_from_sizes(const std::map<std::string, int>& sizes, const std::string& where,
                                 const std::string& order) {
  for (const auto& [key, value] : sizes) {
    if (key != "world" && key != "tp" && key != "cp" && key != "pp" && key != "ep" && key != "etp" && key != "dp" &&
        key != "vpp" && key != "gtp" && key != "egtp")
      throw std::invalid_argument(where + ": unknown size '" + key +
                                  "' (world, tp, cp, pp, ep, etp, dp, vpp, gtp, egtp)");
    if (value < 1) throw std::invalid_argument(where + ": " + key + " must be >= 1, got " + std::to_string(value));
  }
  const auto get = [&](const char* key) {
    const auto it = sizes.find(key);
    return it == sizes.end() ? 1 : it->second;
  };
  ParallelLayout l;
  l.tp = get("tp");
  l.cp = get("cp");
  l.pp = get("pp");
  l.ep = get("ep");
  l.etp = get("etp");
  l.vpp = get("vpp");
  l.gtp = get("gtp");
  l.egtp = get("egtp");
  l.order = order;
  // Each factor is an int (< 2^31) and each partial product is checked against 2^30 before the next factor, so
  // no product overflows 64 bits.
  long long dense = 1;
  for (int f : {l.tp, l.cp, l.pp, l.gtp, get("dp")}) {
    dense *= f;
    if (dense > (1LL << 30)) throw std::invalid_argument(where + ": tp·cp·pp·gtp·dp is too large");
  }
  l.world = sizes.count("world") ? sizes.at("world") : static_cast<int>(dense);
  if (sizes.count("world") && sizes.count("dp") && dense != l.world)
    throw std::invalid_argument(where + ": world " + std::to_string(l.world) + " is not tp·cp·pp·gtp·dp = " +
                                std::to_string(dense));
  l.validate();
  return l;
}

}  // namespace moe
