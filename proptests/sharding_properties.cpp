// Checkpoint-free round trip of the weight sharding (distributed/layer_shard): every rank cuts the global
// parameters, the ranks gather their shards back through the communicator — ETP slices over expt_tp, experts
// over ep, the shared expert's TP slices over tp — and every rank must then hold exactly the global tensors.
// The re-assembly here is written from the layout's definition (contiguous experts per EP rank; slice j of
// each SwiGLU = rows j of the gate and of the up half of fc1, columns j of fc2), not from shard_layer.
#include "proptests/generators.hpp"
#include "proptests/property.hpp"

#include "distributed/comm/inproc_world.hpp"
#include "distributed/comm/row_collectives.hpp"
#include "distributed/train/rank_groups.hpp"

#include <mutex>

namespace moe::proptest {
namespace {

// Gathers `parts` slices of a SwiGLU (fc1 [2d/parts, w], fc2 [w, d/parts]) over `group` into the whole one.
void gather_swiglu(Communicator& group, const Matrix<double>& fc1, const Matrix<double>& fc2, Matrix<double>& fc1_all,
                   Matrix<double>& fc2_all) {
  const int parts = group.size();
  const auto dl = fc2.cols();
  const std::vector<std::int64_t> rows(static_cast<size_t>(parts), fc1.rows());
  const Matrix<double> stacked = dist::allgatherv_rows(group, fc1, rows);  // [parts·2dl, w]: gate_j; up_j per part
  fc1_all.resize(2 * dl * parts, fc1.cols());
  for (int j = 0; j < parts; ++j) {
    fc1_all.middleRows(j * dl, dl) = stacked.middleRows(2 * dl * j, dl);
    fc1_all.middleRows(dl * parts + j * dl, dl) = stacked.middleRows(2 * dl * j + dl, dl);
  }
  const Matrix<double> fc2_t = fc2.transpose();
  const std::vector<std::int64_t> cols(static_cast<size_t>(parts), dl);
  fc2_all = dist::allgatherv_rows(group, fc2_t, cols).transpose();
}

}  // namespace

MOE_PROPERTY(Sharding, GatheredWeightsRoundTripToTheGlobalOnes, 100, ()) {
  const Scenario s = *scenarios();
  const dist::CheckProblem p = make_problem(s);
  const ProcessGroups groups(s.layout);
  std::mutex mu;
  std::string failure;
  InprocWorld(s.layout.world).run([&](Communicator& world) {
    const dist::RankGroups comms(world, groups);
    const dist::ModelShard<double> shard = dist::shard_model(s.config, p.params, groups, world.rank());
    std::string why;
    for (size_t li = 0; li < shard.layers.size() && why.empty(); ++li) {  // this rank's pipeline stage
      const int l = shard.layer_id(li);
      const dist::LayerShard<double>& layer = shard.layers[li];
      const MoeParams<double>& global = p.params.layers[static_cast<size_t>(l)];
      // Local experts, each whole after the ETP gather, stacked, then every EP rank's stack in ep order.
      Matrix<double> fc1_local, fc2_local;
      for (size_t i = 0; i < layer.experts.fc1.size(); ++i) {
        Matrix<double> fc1, fc2;
        gather_swiglu(*comms.expt_tp, layer.experts.fc1[i], layer.experts.fc2[i], fc1, fc2);
        fc1_local.conservativeResize(fc1_local.rows() + fc1.rows(), fc1.cols());
        fc1_local.bottomRows(fc1.rows()) = fc1;
        const Matrix<double> fc2_t = fc2.transpose();
        fc2_local.conservativeResize(fc2_local.rows() + fc2_t.rows(), fc2_t.cols());
        fc2_local.bottomRows(fc2_t.rows()) = fc2_t;
      }
      const int ep = comms.ep->size();
      const Matrix<double> fc1_all = dist::allgatherv_rows(
          *comms.ep, fc1_local, std::vector<std::int64_t>(static_cast<size_t>(ep), fc1_local.rows()));
      const Matrix<double> fc2_all = dist::allgatherv_rows(
          *comms.ep, fc2_local, std::vector<std::int64_t>(static_cast<size_t>(ep), fc2_local.rows()));
      const auto d2 = global.expert_fc1[0].rows(), d = global.expert_fc2[0].cols();
      for (int e = 0; e < s.config.layer.num_experts && why.empty(); ++e) {
        if (fc1_all.middleRows(e * d2, d2) != global.expert_fc1[static_cast<size_t>(e)])
          why = "layer " + std::to_string(l) + " expert_fc1[" + std::to_string(e) + "]";
        else if (fc2_all.middleRows(e * d, d).transpose() != global.expert_fc2[static_cast<size_t>(e)])
          why = "layer " + std::to_string(l) + " expert_fc2[" + std::to_string(e) + "]";
      }
      if (why.empty() && s.config.layer.has_shared_expert()) {
        Matrix<double> fc1, fc2;
        gather_swiglu(*comms.tp, layer.shared_fc1, layer.shared_fc2, fc1, fc2);
        if (fc1 != global.shared_fc1 || fc2 != global.shared_fc2) why = "layer " + std::to_string(l) + " shared expert";
      }
      if (why.empty() && layer.router_weight != global.router_weight) why = "layer " + std::to_string(l) + " router";
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!why.empty() && failure.empty()) failure = "rank " + std::to_string(world.rank()) + " re-assembles " + why + " differently";
  });
  if (!failure.empty()) RC_FAIL(failure);
}

}  // namespace moe::proptest
