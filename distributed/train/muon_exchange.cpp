#include "distributed/train/muon_exchange.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <stdexcept>

namespace moe::dist {
namespace {

// The global model with every trained element replaced by its flat index in its tensor (exact in double).
ModelParams<double> index_model(const ModelConfig& config) {
  ModelParams<double> model = random_model_params<double>(config, 0);
  for (const auto& t : trained_tensors(config, model)) std::iota(t.data, t.data + t.size, 0.0);
  return model;
}

}  // namespace

MuonExchange::MuonExchange(const ModelConfig& config, const ProcessGroups& groups, const RankGroups& comms,
                           ModelShard<double>& params)
    : ep_(comms.ep.get()), pp_(comms.pp.get()) {
  const int me = comms.rank;
  ModelParams<double> indices = index_model(config);
  std::map<std::string, std::vector<Eigen::Index>> logical_shape;
  for (const auto& t : trained_tensors(config, indices)) logical_shape[t.name] = t.shape;

  const int experts = config.layer.num_experts;
  const auto mine = shard_tensors(params, groups.experts_of(me, experts).first);
  is_muon_.resize(mine.size());
  for (size_t i = 0; i < mine.size(); ++i) is_muon_[i] = is_muon_matrix(mine[i].name, logical_shape.at(mine[i].name));

  const std::vector<int> members[2] = {groups.group(GroupKind::tp_dp_cp, me), expt_tp_dp_members(groups, me)};
  // Each member's cut of the index model, once: a rank is in both groups, and so are its tp/etp peers.
  std::map<int, ModelShard<double>> cuts;
  auto cut_of = [&](int member) -> ModelShard<double>& {
    auto at = cuts.find(member);
    if (at == cuts.end()) at = cuts.emplace(member, shard_model(config, indices, groups, member)).first;
    return at->second;
  };
  const GroupKind replica_axis[2] = {GroupKind::dp_cp, GroupKind::expt_dp};
  groups_[0].comm = comms.tp_dp_cp.get();
  groups_[1].comm = comms.expt_tp_dp.get();
  for (int k = 0; k < 2; ++k) {
    MuonGroup& g = groups_[k];
    for (size_t i = 0; i < mine.size(); ++i) {
      if (!is_muon_[i] || (mine[i].param_class == ParamClass::expert) != (k == 1)) continue;
      const auto& shape = logical_shape.at(mine[i].name);
      g.matrices.push_back({i, shape[0], shape[1], mine[i].param_class, 0, {}, {}, {}});
    }
    // Each member's pieces, by name, from its own cut of the index model.
    std::map<std::string, size_t> position;
    for (size_t j = 0; j < g.matrices.size(); ++j) position[mine[g.matrices[j].tensor].name] = j;
    for (int member : members[k]) {
      g.replica.push_back(groups.rank_in(replica_axis[k], member));
      size_t found = 0;
      for (const auto& t : shard_tensors(cut_of(member), groups.experts_of(member, experts).first)) {
        const auto at = position.find(t.name);
        if (at == position.end()) continue;
        std::vector<std::int64_t>& piece = g.matrices[at->second].pieces.emplace_back();
        for (Eigen::Index e = 0; e < t.size; ++e) piece.push_back(static_cast<std::int64_t>(t.data[e]));
        ++found;
      }
      if (found != g.matrices.size())
        throw std::logic_error("muon: the ranks of a Muon group do not hold the same matrices");
    }
    g.replicas = *std::max_element(g.replica.begin(), g.replica.end()) + 1;
    std::stable_sort(g.matrices.begin(), g.matrices.end(), [](const MuonMatrix& a, const MuonMatrix& b) {
      return std::pair{a.rows, a.cols} < std::pair{b.rows, b.cols};
    });
    for (size_t j = 0; j < g.matrices.size(); ++j) g.matrices[j].owner = static_cast<int>(j) % g.comm->size();
  }
}

std::vector<std::vector<std::vector<double>>> MuonExchange::all_to_all(const MuonGroup& g, bool to_owners,
                                                                       const Pack& pack) const {
  const int n = g.comm->size(), me = g.comm->rank();
  // Towards the owners a rank sends its piece of every matrix to that matrix's owner; back, an owner sends every
  // member that member's piece.
  auto sends = [&](int peer, const MuonMatrix& m) { return to_owners ? m.owner == peer : m.owner == me; };
  auto receives = [&](int peer, const MuonMatrix& m) { return to_owners ? m.owner == me : m.owner == peer; };
  auto arriving = [&](int peer, const MuonMatrix& m) {
    return m.pieces[static_cast<size_t>(to_owners ? peer : me)].size();
  };
  std::vector<std::int64_t> send_counts(static_cast<size_t>(n), 0), recv_counts(static_cast<size_t>(n), 0);
  std::vector<double> send;
  for (int dest = 0; dest < n; ++dest)
    for (size_t j = 0; j < g.matrices.size(); ++j) {
      if (!sends(dest, g.matrices[j])) continue;
      const size_t before = send.size();
      pack(dest, j, send);
      send_counts[static_cast<size_t>(dest)] += static_cast<std::int64_t>(send.size() - before);
    }
  for (int source = 0; source < n; ++source)
    for (const MuonMatrix& m : g.matrices)
      if (receives(source, m))
        recv_counts[static_cast<size_t>(source)] += static_cast<std::int64_t>(arriving(source, m));
  std::vector<double> recv(
      static_cast<size_t>(std::accumulate(recv_counts.begin(), recv_counts.end(), std::int64_t{0})));
  g.comm->alltoallv<double>(send, send_counts, recv, recv_counts);

  std::vector<std::vector<std::vector<double>>> received(g.matrices.size());
  size_t at = 0;
  for (int source = 0; source < n; ++source)
    for (size_t j = 0; j < g.matrices.size(); ++j) {
      if (!receives(source, g.matrices[j])) continue;
      const size_t count = arriving(source, g.matrices[j]);
      received[j].resize(static_cast<size_t>(n));
      received[j][static_cast<size_t>(source)].assign(recv.begin() + static_cast<std::ptrdiff_t>(at),
                                                      recv.begin() + static_cast<std::ptrdiff_t>(at + count));
      at += count;
    }
  return received;
}

std::vector<std::vector<std::vector<double>>> MuonExchange::to_owners(
    const MuonGroup& g, const std::vector<const double*>& my_pieces) const {
  const size_t me = static_cast<size_t>(g.comm->rank());
  return all_to_all(g, true, [&](int, size_t j, std::vector<double>& send) {
    send.insert(send.end(), my_pieces[j], my_pieces[j] + g.matrices[j].pieces[me].size());
  });
}

std::vector<std::vector<double>> MuonExchange::from_owners(const MuonGroup& g, const Whole& whole) const {
  auto received = all_to_all(g, false, [&](int dest, size_t j, std::vector<double>& send) {
    const auto& piece = g.matrices[j].pieces[static_cast<size_t>(dest)];
    const Matrix<double>& w = whole(j);
    for (std::int64_t index : piece) send.push_back(w.data()[index]);
  });
  std::vector<std::vector<double>> mine(g.matrices.size());
  for (size_t j = 0; j < g.matrices.size(); ++j)
    mine[j] = std::move(received[j][static_cast<size_t>(g.matrices[j].owner)]);
  return mine;
}

Matrix<double> MuonExchange::assemble(const MuonGroup& g, const MuonMatrix& m,
                                      const std::vector<std::vector<double>>& received, bool sum) const {
  Matrix<double> whole;
  const int replicas = sum ? g.replicas : 1;
  for (int k = 0; k < replicas; ++k) {
    Matrix<double> partial = Matrix<double>::Zero(m.rows, m.cols);
    std::vector<bool> filled(static_cast<size_t>(partial.size()), false);
    for (size_t s = 0; s < received.size(); ++s) {
      if (g.replica[s] != k) continue;
      for (size_t e = 0; e < received[s].size(); ++e) {
        const auto index = static_cast<Eigen::Index>(m.pieces[s][e]);
        if (filled[static_cast<size_t>(index)]) continue;  // a tp replica of a piece already placed
        partial.data()[index] = received[s][e];
        filled[static_cast<size_t>(index)] = true;
      }
    }
    if (std::find(filled.begin(), filled.end(), false) != filled.end())
      throw std::logic_error("muon: the pieces of one replica do not cover the whole matrix");
    if (k == 0)
      whole = std::move(partial);
    else
      whole += partial;
  }
  return whole;
}

void MuonExchange::gather_gradients(ModelShard<double>& grads, const GradSyncPlan& plan, double global_tokens) {
  const auto tensors = shard_tensors(grads, 0);
  for (MuonGroup& g : groups_) {
    if (g.matrices.empty()) continue;
    std::vector<const double*> pieces;
    for (const MuonMatrix& m : g.matrices) pieces.push_back(tensors[m.tensor].data);
    const auto received = to_owners(g, pieces);
    for (size_t j = 0; j < g.matrices.size(); ++j) {
      MuonMatrix& m = g.matrices[j];
      if (m.owner != g.comm->rank()) continue;
      m.grad = assemble(g, m, received[j], true);
      if (plan.of(m.param_class).op == ReduceOp::avg) m.grad /= static_cast<double>(g.replicas);
      plan.after_collective<double>(m.param_class, std::span<double>(m.grad.data(), static_cast<size_t>(m.grad.size())),
                                    global_tokens);
    }
  }
}

double MuonExchange::squares() const {
  double sum[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    const MuonGroup& g = groups_[k];
    for (const MuonMatrix& m : g.matrices)
      if (m.owner == g.comm->rank()) sum[k] += m.grad.squaredNorm();
    g.comm->allreduce<double>(std::span(&sum[k], 1), ReduceOp::sum);
  }
  ep_->allreduce<double>(std::span(&sum[1], 1), ReduceOp::sum);  // experts: every ep rank holds others
  double total = sum[0] + sum[1];
  pp_->allreduce<double>(std::span(&total, 1), ReduceOp::sum);
  return total;
}

void MuonExchange::scale_gradients(double c) {
  for (MuonGroup& g : groups_)
    for (MuonMatrix& m : g.matrices)
      if (m.owner == g.comm->rank()) m.grad *= c;
}

Matrix<double> MuonExchange::direction(const MuonConfig& muon, const MuonGroup& g, const MuonMatrix& m) const {
  (void)g;
  return muon_direction(muon, m.momentum, m.grad);
}

void MuonExchange::update(const MuonConfig& muon, ModelShard<double>& params) {
  const auto tensors = shard_tensors(params, 0);
  for (MuonGroup& g : groups_) {
    if (g.matrices.empty()) continue;
    // Same-shaped matrices are neighbours in the list, so an owner's Newton–Schulz runs shape by shape.
    std::vector<Matrix<double>> directions(g.matrices.size());
    for (size_t j = 0; j < g.matrices.size(); ++j) {
      MuonMatrix& m = g.matrices[j];
      if (m.owner != g.comm->rank()) continue;
      if (m.momentum.size() == 0) m.momentum = Matrix<double>::Zero(m.rows, m.cols);
      m.momentum += (1 - muon.momentum) * (m.grad - m.momentum);
      directions[j] = direction(muon, g, m);
    }
    const auto pieces = from_owners(g, [&](size_t j) -> const Matrix<double>& { return directions[j]; });
    for (size_t j = 0; j < g.matrices.size(); ++j) {
      double* p = tensors[g.matrices[j].tensor].data;
      for (size_t e = 0; e < pieces[j].size(); ++e) {
        p[e] *= 1 - muon.lr * muon.weight_decay;
        p[e] -= muon.lr * pieces[j][e];
      }
    }
  }
}

std::vector<std::vector<double>> MuonExchange::momentum_pieces() const {
  std::vector<std::vector<double>> out(is_muon_.size());
  for (const MuonGroup& g : groups_) {
    if (g.matrices.empty()) continue;
    std::vector<Matrix<double>> momentum(g.matrices.size());
    for (size_t j = 0; j < g.matrices.size(); ++j) {
      const MuonMatrix& m = g.matrices[j];
      if (m.owner == g.comm->rank())
        momentum[j] = m.momentum.size() > 0 ? m.momentum : Matrix<double>::Zero(m.rows, m.cols);
    }
    auto pieces = from_owners(g, [&](size_t j) -> const Matrix<double>& { return momentum[j]; });
    for (size_t j = 0; j < g.matrices.size(); ++j) out[g.matrices[j].tensor] = std::move(pieces[j]);
  }
  return out;
}

void MuonExchange::set_momentum(const std::vector<std::vector<double>>& pieces) {
  if (pieces.size() != is_muon_.size()) throw std::invalid_argument("muon state: one momentum per trained tensor");
  for (MuonGroup& g : groups_) {
    if (g.matrices.empty()) continue;
    std::vector<const double*> mine;
    for (const MuonMatrix& m : g.matrices) {
      if (pieces[m.tensor].size() != m.pieces[static_cast<size_t>(g.comm->rank())].size())
        throw std::invalid_argument("muon state: a momentum piece has the wrong size");
      mine.push_back(pieces[m.tensor].data());
    }
    const auto received = to_owners(g, mine);
    for (size_t j = 0; j < g.matrices.size(); ++j)
      if (g.matrices[j].owner == g.comm->rank())
        g.matrices[j].momentum = assemble(g, g.matrices[j], received[j], false);
  }
}

}  // namespace moe::dist
