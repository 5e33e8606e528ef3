// Muon in the parallel system (the optimizer is reference/muon.hpp). Newton–Schulz needs the whole logical matrix,
// but a rank holds a piece of it (a TP or ETP slice) and only its data-parallel share of the gradient. So, as in
// DeepSeek-V4's Muon, gradients move by an all-to-all: every Muon matrix has one owner rank in its Muon group — the
// ranks holding pieces of it or replicas of those pieces —
//   dense matrices (router, shared expert and gate, latent projections): tp × dp_cp     (RankGroups::tp_dp_cp)
//   routed experts' fc1 and fc2:                                         expt_tp × expt_dp (RankGroups::expt_tp_dp)
// and each step runs, after the gradient plan's steps 1–2 (grad_sync.hpp):
//   1. gradient all-to-all: every rank sends its piece of every matrix to that matrix's owner;
//   2. the owner assembles the whole gradient: per data-parallel replica index the pieces put where they belong
//      (a tp-replicated piece, e.g. the router after its SUM over tp, taken once), the replicas summed in replica
//      order (÷ their number under AVG), then the plan's step 4;
//   3. with clipping, the owners' squares enter the global norm and the owner scales by the clip factor;
//   4. momentum and Newton–Schulz on the whole matrix at the owner, its matrices taken shape by shape;
//   5. update all-to-all: the owner sends each holder its piece of the direction, and every rank applies weight
//      decay and the step to its own piece.
// Owners are assigned round-robin over the group's matrices sorted by shape, so same-shaped matrices spread over the
// group. Which piece of the whole matrix a rank holds is read off the sharding itself: the global model filled with
// each element's flat index, cut by shard_model for each member of the group.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "distributed/train/grad_sync.hpp"
#include "distributed/train/model_shard.hpp"
#include "distributed/train/rank_groups.hpp"
#include "reference/muon.hpp"

namespace moe::dist {

class MuonExchange {
 public:
  MuonExchange(const ModelConfig& config, const ProcessGroups& groups, const RankGroups& comms,
               ModelShard<double>& params);

  // Whether shard tensor i (shard_tensors order) is a Muon matrix.
  bool is_muon(size_t i) const { return is_muon_[i]; }

  // Steps 1–2 on gradients that went through the plan's steps 1–2: collective over both Muon groups.
  void gather_gradients(ModelShard<double>& grads, const GradSyncPlan& plan, double global_tokens);
  // Σ g² of every Muon matrix of the model, each counted once (collective: Muon groups, then ep and pp).
  double squares() const;
  void scale_gradients(double c);
  // Steps 4–5: updates every Muon matrix of `params` (collective over both Muon groups).
  void update(const MuonConfig& muon, ModelShard<double>& params);

  // The momentum of each shard tensor as this rank's piece (empty for tensors Muon does not take); collective.
  std::vector<std::vector<double>> momentum_pieces() const;
  // Installs momentum pieces (e.g. from a checkpoint; replicas must agree): each owner keeps its whole matrices.
  void set_momentum(const std::vector<std::vector<double>>& pieces);

 private:
  struct MuonMatrix {
    size_t tensor = 0;  // index in shard_tensors
    Eigen::Index rows = 0, cols = 0;
    ParamClass param_class = ParamClass::dense;
    int owner = 0;                                  // rank in the Muon group
    std::vector<std::vector<std::int64_t>> pieces;  // per group member: the flat index of each of its elements
    // Owner only: the synchronised whole gradient and the momentum buffer.
    Matrix<double> grad, momentum;
  };
  struct MuonGroup {
    Communicator* comm = nullptr;
    std::vector<int> replica;  // per member: its data-parallel replica index
    int replicas = 1;
    std::vector<MuonMatrix> matrices;  // the same list on every member
  };

  // One all-to-all over the group, towards the owners or back from them; pack(peer, j, send) appends what goes to
  // `peer` of matrix j. Returns what arrived: [matrix][source member].
  using Pack = std::function<void(int peer, size_t j, std::vector<double>& send)>;
  std::vector<std::vector<std::vector<double>>> all_to_all(const MuonGroup& g, bool to_owners, const Pack& pack) const;
  // Every member's piece of each matrix, to its owner; on owners, the pieces received ([matrix][member]).
  std::vector<std::vector<std::vector<double>>> to_owners(const MuonGroup& g,
                                                          const std::vector<const double*>& my_pieces) const;
  // The reverse: each owner cuts whole(j) into every member's piece; returns this rank's piece of each matrix.
  using Whole = std::function<const Matrix<double>&(size_t j)>;
  std::vector<std::vector<double>> from_owners(const MuonGroup& g, const Whole& whole) const;
  // The whole matrix from the pieces the owner received: replicas summed (sum) or replica 0 taken (sum = false).
  Matrix<double> assemble(const MuonGroup& g, const MuonMatrix& m, const std::vector<std::vector<double>>& received,
                          bool sum) const;
  // Orthogonalising the whole matrix.
  Matrix<double> direction(const MuonConfig& muon, const MuonGroup& g, const MuonMatrix& m) const;

  std::vector<bool> is_muon_;
  MuonGroup groups_[2];  // dense, expert
  Communicator *ep_, *pp_;
};

}  // namespace moe::dist
