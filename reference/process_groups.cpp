#include "reference/process_groups.hpp"

#include "reference/config.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

// The token set of each group in its mesh (parallel_state.py, initialize_model_parallel).
std::string_view token_set(GroupKind kind) {
  switch (kind) {
    case GroupKind::tp: return "tp";
    case GroupKind::cp: return "cp";
    case GroupKind::dp: return "dp";
    case GroupKind::dp_cp: return "dp-cp";
    case GroupKind::tp_cp: return "tp-cp";
    case GroupKind::tp_dp_cp: return "tp-gtp_remat-dp-cp";
    case GroupKind::pp: return "pp";
    case GroupKind::gtp: return "gtp_remat";
    case GroupKind::dp_gtp: return "gtp_remat-dp";
    case GroupKind::dp_cp_gtp: return "gtp_remat-dp-cp";
    case GroupKind::ep: return "ep";
    case GroupKind::expt_tp: return "tp";
    case GroupKind::tp_ep: return "tp-ep";
    case GroupKind::expt_dp: return "dp";
    case GroupKind::expt_gtp: return "gtp_remat";
    case GroupKind::expt_dp_gtp: return "gtp_remat-dp";
  }
  throw std::logic_error("unknown GroupKind");
}

ParallelLayout validated(const ParallelLayout& layout) {
  layout.validate();
  return layout;
}

}  // namespace

std::string_view to_string(GroupKind kind) {
  switch (kind) {
    case GroupKind::tp: return "tp";
    case GroupKind::cp: return "cp";
    case GroupKind::dp: return "dp";
    case GroupKind::dp_cp: return "dp_cp";
    case GroupKind::tp_cp: return "tp_cp";
    case GroupKind::tp_dp_cp: return "tp_dp_cp";
    case GroupKind::pp: return "pp";
    case GroupKind::gtp: return "gtp";
    case GroupKind::dp_gtp: return "dp_gtp";
    case GroupKind::dp_cp_gtp: return "dp_cp_gtp";
    case GroupKind::ep: return "ep";
    case GroupKind::expt_tp: return "expt_tp";
    case GroupKind::tp_ep: return "tp_ep";
    case GroupKind::expt_dp: return "expt_dp";
    case GroupKind::expt_gtp: return "expt_gtp";
    case GroupKind::expt_dp_gtp: return "expt_dp_gtp";
  }
  throw std::logic_error("unknown GroupKind");
}

std::vector<GroupKind> all_group_kinds() {
  using enum GroupKind;
  return {tp, cp, dp, dp_cp, tp_cp, tp_dp_cp, pp, gtp, dp_gtp, dp_cp_gtp, ep, expt_tp, tp_ep, expt_dp, expt_gtp, expt_dp_gtp};
}

bool is_expert_group(GroupKind kind) {
  using enum GroupKind;
  return kind == ep || kind == expt_tp || kind == tp_ep || kind == expt_dp || kind == expt_gtp || kind == expt_dp_gtp;
}

ExpertRange local_experts(int num_experts, int ep_size, int ep_rank) {
  if (num_experts < 1 || ep_size < 1 || num_experts % ep_size != 0)
    throw std::invalid_argument("expert placement rule: num_experts (" + std::to_string(num_experts) +
                                ") must be divisible by ep (" + std::to_string(ep_size) + ")");
  if (ep_rank < 0 || ep_rank >= ep_size)
    throw std::invalid_argument("expert placement rule: ep rank " + std::to_string(ep_rank) + " is outside [0, " +
                                std::to_string(ep_size) + ")");
  const int per_rank = num_experts / ep_size;
  return {ep_rank * per_rank, per_rank};
}

ProcessGroups::ProcessGroups(const ParallelLayout& layout)
    : layout_(validated(layout)), dense_(layout_.dense_mesh()), expert_(layout_.expert_mesh()) {}

const RankGenerator& ProcessGroups::mesh(GroupKind kind) const { return is_expert_group(kind) ? expert_ : dense_; }

std::vector<int> ProcessGroups::group(GroupKind kind, int rank) const {
  return mesh(kind).group_of(rank, token_set(kind));
}

std::vector<std::vector<int>> ProcessGroups::all_groups(GroupKind kind) const {
  return mesh(kind).rank_groups(token_set(kind));
}

int ProcessGroups::rank_in(GroupKind kind, int rank) const {
  const auto members = group(kind, rank);
  return static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
}

ExpertRange ProcessGroups::experts_of(int rank, int num_experts) const {
  return local_experts(num_experts, layout_.ep, rank_in(GroupKind::ep, rank));
}

void check_layer_sharding(const MoeConfig& c, const ParallelLayout& layout) {
  local_experts(c.num_experts, layout.ep, 0);
  if (c.ffn_hidden % layout.etp != 0)
    throw std::invalid_argument("ffn_hidden (" + std::to_string(c.ffn_hidden) + ") must be divisible by etp (" +
                                std::to_string(layout.etp) + ")");
  if (c.has_shared_expert() && c.shared_expert_ffn_hidden % layout.tp != 0)
    throw std::invalid_argument("shared_expert_ffn_hidden (" + std::to_string(c.shared_expert_ffn_hidden) +
                                ") must be divisible by tp (" + std::to_string(layout.tp) + ")");
}

}  // namespace moe
