#include "distributed/train/expert_replication.hpp"

#include "distributed/comm/row_collectives.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe::dist {
namespace {

std::int64_t size_of(RowRange r) { return r.end - r.begin; }

// Each rank's rows under a plan: the owner's part 0 of each of its experts, a replica's part j + 1.
std::vector<std::int64_t> loads_of(const ReplicationPlan& plan, const std::vector<std::int64_t>& counts, int ep) {
  const int per_rank = static_cast<int>(counts.size()) / ep;
  std::vector<std::int64_t> load(static_cast<size_t>(ep), 0);
  for (size_t e = 0; e < counts.size(); ++e) {
    const auto& reps = plan.replicas[e];
    const int parts = 1 + static_cast<int>(reps.size());
    load[static_cast<size_t>(static_cast<int>(e) / per_rank)] += size_of(part_of(counts[e], parts, 0));
    for (size_t j = 0; j < reps.size(); ++j)
      load[static_cast<size_t>(reps[j])] += size_of(part_of(counts[e], parts, static_cast<int>(j) + 1));
  }
  return load;
}

// Flattened copies of the listed local experts' fc1 and fc2, expert after expert.
template <typename T>
std::vector<T> flatten(const kernels::ExpertShards<T>& w, const std::vector<int>& local) {
  std::vector<T> out;
  for (int i : local) {
    const auto& fc1 = w.fc1[static_cast<size_t>(i)];
    const auto& fc2 = w.fc2[static_cast<size_t>(i)];
    out.insert(out.end(), fc1.data(), fc1.data() + fc1.size());
    out.insert(out.end(), fc2.data(), fc2.data() + fc2.size());
  }
  return out;
}

}  // namespace

bool ReplicationPlan::empty() const { return slots() == 0; }

int ReplicationPlan::slots() const {
  int n = 0;
  for (const auto& r : replicas) n += static_cast<int>(r.size());
  return n;
}

RowRange part_of(std::int64_t n, int parts, int j) { return {n * j / parts, n * (j + 1) / parts}; }

ReplicationPlan plan_replicas(const std::vector<std::int64_t>& counts, int ep, int slots) {
  const int experts = static_cast<int>(counts.size());
  if (ep < 1 || experts % ep != 0)
    throw std::invalid_argument("replicated experts: ep (" + std::to_string(ep) + ") must divide the " +
                                std::to_string(experts) + " experts");
  if (slots < 0) throw std::invalid_argument("replicated experts: a negative number of slots");
  ReplicationPlan plan;
  plan.replicas.assign(counts.size(), {});
  const int per_rank = experts / ep;
  for (int s = 0; s < slots; ++s) {
    const std::vector<std::int64_t> load = loads_of(plan, counts, ep);
    const auto busiest = std::max_element(load.begin(), load.end());  // the first on a tie
    const int p = static_cast<int>(busiest - load.begin());
    // The hottest expert on p: the largest part p computes, as owner or as a replica.
    int hot = -1;
    std::int64_t hot_rows = 0;
    for (int e = 0; e < experts; ++e) {
      const auto& reps = plan.replicas[static_cast<size_t>(e)];
      const int parts = 1 + static_cast<int>(reps.size());
      int part = e / per_rank == p ? 0 : -1;
      for (size_t j = 0; j < reps.size(); ++j)
        if (reps[j] == p) part = static_cast<int>(j) + 1;
      if (part < 0) continue;
      const std::int64_t rows = size_of(part_of(counts[size_t(e)], parts, part));
      if (rows > hot_rows) hot = e, hot_rows = rows;
    }
    if (hot < 0) break;
    const int owner = hot / per_rank;
    // The least loaded rank that holds no copy of it.
    auto& reps = plan.replicas[static_cast<size_t>(hot)];
    int target = -1;
    for (int q = 0; q < ep; ++q) {
      if (q == owner || std::find(reps.begin(), reps.end(), q) != reps.end()) continue;
      if (target < 0 || load[size_t(q)] < load[size_t(target)]) target = q;
    }
    if (target < 0) break;
    reps.push_back(target);
    const std::vector<std::int64_t> after = loads_of(plan, counts, ep);
    if (after[size_t(p)] >= *busiest || *std::max_element(after.begin(), after.end()) > *busiest) {
      reps.pop_back();  // no better: the plan is done
      break;
    }
  }
  return plan;
}

template <typename T>
ExpertReplicas<T>::ExpertReplicas(const ReplicationPlan& plan, Communicator& ep, int num_experts,
                                  const KernelBackend& kernels, const kernels::SwigluOptions& options)
    : plan_(plan),
      ep_(ep),
      num_experts_(num_experts),
      first_expert_(local_experts(num_experts, ep.size(), ep.rank()).first),
      local_experts_(local_experts(num_experts, ep.size(), ep.rank()).count),
      kernels_(kernels),
      options_(options) {
  if (static_cast<int>(plan.replicas.size()) != num_experts)
    throw std::invalid_argument("replicated experts: the plan has " + std::to_string(plan.replicas.size()) +
                                " experts, the layer " + std::to_string(num_experts));
  for (size_t e = 0; e < plan.replicas.size(); ++e) {
    const auto& reps = plan.replicas[e];
    const int owner = static_cast<int>(e) / local_experts_;
    for (size_t j = 0; j < reps.size(); ++j) {
      const int q = reps[j];
      // One part per (expert, rank): the receivers' order of parts relies on it.
      const auto before = reps.begin() + static_cast<std::ptrdiff_t>(j);
      if (q < 0 || q >= ep.size() || q == owner || std::find(reps.begin(), before, q) != before)
        throw std::invalid_argument("replicated experts: expert " + std::to_string(e) + " has a replica on EP rank " +
                                    std::to_string(q) + " (its owner is " + std::to_string(owner) + " of " +
                                    std::to_string(ep.size()) + "; each other rank holds at most one copy)");
    }
  }
}

template <typename T>
Matrix<T> ExpertReplicas<T>::forward(const ExpertRows<T>& rows, const kernels::ExpertShards<T>& weights) {
  const int peers = ep_.size(), me = ep_.rank();
  const auto first_of = [&](int q) { return local_experts(num_experts_, peers, q).first; };
  // Owner: part 0 of each local expert stays, part j + 1 goes to replicas[e][j]; sent in peer order.
  kept_.clear();
  kept_sizes_.assign(static_cast<size_t>(local_experts_), 0);
  std::vector<std::vector<Part>> to_peer(static_cast<size_t>(peers));
  std::int64_t offset = 0;
  for (int i = 0; i < local_experts_; ++i) {
    const int e = first_expert_ + i;
    const std::int64_t n = rows.group_sizes[static_cast<size_t>(i)];
    const auto& reps = plan_.replicas[static_cast<size_t>(e)];
    const int parts = 1 + static_cast<int>(reps.size());
    const RowRange keep = part_of(n, parts, 0);
    for (std::int64_t t = keep.begin; t < keep.end; ++t) kept_.push_back(offset + t);
    kept_sizes_[static_cast<size_t>(i)] = size_of(keep);
    for (size_t j = 0; j < reps.size(); ++j) {
      const RowRange part = part_of(n, parts, static_cast<int>(j) + 1);
      to_peer[static_cast<size_t>(reps[j])].push_back({e, reps[j], {offset + part.begin, offset + part.end}});
    }
    offset += n;
  }
  sent_.clear();
  sent_rows_per_peer_.assign(static_cast<size_t>(peers), 0);
  std::vector<std::int64_t> sent_parts(static_cast<size_t>(peers), 0), part_rows;
  RowIndex sent_positions;
  std::vector<int> sent_local;
  for (int q = 0; q < peers; ++q)
    for (const Part& part : to_peer[static_cast<size_t>(q)]) {
      sent_.push_back(part);
      sent_rows_per_peer_[size_t(q)] += size_of(part.rows);
      ++sent_parts[size_t(q)];
      part_rows.push_back(size_of(part.rows));
      for (std::int64_t t = part.rows.begin; t < part.rows.end; ++t) sent_positions.push_back(t);
      sent_local.push_back(part.expert - first_expert_);
    }
  // Replica: the parts this rank computes, owner by owner in the same order.
  computed_.clear();
  std::vector<std::int64_t> computed_parts(static_cast<size_t>(peers), 0);
  for (int q = 0; q < peers; ++q)
    for (int e = first_of(q); e < first_of(q) + local_experts_; ++e) {
      const auto& reps = plan_.replicas[static_cast<size_t>(e)];
      if (std::find(reps.begin(), reps.end(), me) == reps.end()) continue;
      computed_.push_back({e, q, {}});
      ++computed_parts[size_t(q)];
    }
  // Row counts of each part, then the rows, their probabilities and the weights.
  computed_sizes_.assign(computed_.size(), 0);
  ep_.alltoallv<std::int64_t>(part_rows, sent_parts, computed_sizes_, computed_parts);
  computed_rows_per_peer_.assign(static_cast<size_t>(peers), 0);
  for (size_t k = 0; k < computed_.size(); ++k)
    computed_rows_per_peer_[size_t(computed_[k].peer)] += computed_sizes_[k];
  const Matrix<T> x_sent = kernels_.gather_rows(rows.x, sent_positions);
  foreign_x_ = alltoallv_rows(ep_, x_sent, sent_rows_per_peer_, computed_rows_per_peer_);
  const Vector<T> probs_sent = rows.probs(sent_positions);
  foreign_probs_.resize(foreign_x_.rows());
  ep_.alltoallv<T>(const_span_of(probs_sent), sent_rows_per_peer_, span_of(foreign_probs_), computed_rows_per_peer_);
  const Eigen::Index fc1_rows = weights.fc1.front().rows(), fc1_cols = weights.fc1.front().cols();
  const Eigen::Index fc2_rows = weights.fc2.front().rows(), fc2_cols = weights.fc2.front().cols();
  const std::int64_t per_expert = fc1_rows * fc1_cols + fc2_rows * fc2_cols;
  const std::vector<T> w_sent = flatten(weights, sent_local);
  std::vector<T> w_recv(computed_.size() * static_cast<size_t>(per_expert));
  std::vector<std::int64_t> w_send_counts(sent_parts), w_recv_counts(computed_parts);
  for (auto& c : w_send_counts) c *= per_expert;
  for (auto& c : w_recv_counts) c *= per_expert;
  ep_.alltoallv<T>(w_sent, w_send_counts, w_recv, w_recv_counts);
  foreign_weights_.fc1.clear();
  foreign_weights_.fc2.clear();
  for (size_t k = 0; k < computed_.size(); ++k) {
    const T* at = w_recv.data() + k * static_cast<size_t>(per_expert);
    foreign_weights_.fc1.emplace_back(Eigen::Map<const Matrix<T>>(at, fc1_rows, fc1_cols));
    foreign_weights_.fc2.emplace_back(Eigen::Map<const Matrix<T>>(at + fc1_rows * fc1_cols, fc2_rows, fc2_cols));
  }

  // Compute: the kept rows here, the received parts as the replica.
  kept_x_ = kernels_.gather_rows(rows.x, kept_);
  kept_probs_ = rows.probs(kept_);
  auto kept = kernels_.grouped_swiglu_forward(kept_x_, kept_sizes_, weights, kept_probs_, options_);
  kept_pre_ = std::move(kept.pre);
  Matrix<T> foreign_y(0, rows.x.cols());
  if (!computed_.empty()) {
    auto foreign = kernels_.grouped_swiglu_forward(foreign_x_, computed_sizes_, foreign_weights_, foreign_probs_,
                                                   options_);
    foreign_pre_ = std::move(foreign.pre);
    foreign_y = std::move(foreign.y);
  }
  const Matrix<T> returned = alltoallv_rows(ep_, foreign_y, computed_rows_per_peer_, sent_rows_per_peer_);

  Matrix<T> y(rows.x.rows(), rows.x.cols());
  for (size_t k = 0; k < kept_.size(); ++k) y.row(kept_[k]) = kept.y.row(static_cast<Eigen::Index>(k));
  for (size_t k = 0; k < sent_positions.size(); ++k) y.row(sent_positions[k]) = returned.row(Eigen::Index(k));
  sent_positions_ = std::move(sent_positions);
  return y;
}

template <typename T>
kernels::GroupedSwigluBackward<T> ExpertReplicas<T>::backward(const Matrix<T>& d_out,
                                                             const kernels::ExpertShards<T>& weights,
                                                             kernels::ExpertShards<T>& grads) {
  // The replicated parts' output gradients to their replicas, which return dx, dprob and their wgrad.
  const Matrix<T> d_sent = kernels_.gather_rows(d_out, sent_positions_);
  const Matrix<T> d_foreign = alltoallv_rows(ep_, d_sent, sent_rows_per_peer_, computed_rows_per_peer_);
  kernels::GroupedSwigluBackward<T> foreign{Matrix<T>(0, d_out.cols()), Vector<T>(0)};
  kernels::ExpertShards<T> foreign_grads;
  for (size_t k = 0; k < computed_.size(); ++k) {
    foreign_grads.fc1.push_back(Matrix<T>::Zero(foreign_weights_.fc1[k].rows(), foreign_weights_.fc1[k].cols()));
    foreign_grads.fc2.push_back(Matrix<T>::Zero(foreign_weights_.fc2[k].rows(), foreign_weights_.fc2[k].cols()));
  }
  if (!computed_.empty())
    foreign = kernels_.grouped_swiglu_backward(foreign_x_, computed_sizes_, foreign_weights_, foreign_probs_,
                                               options_, foreign_pre_, d_foreign, foreign_grads);
  const Matrix<T> dx_returned = alltoallv_rows(ep_, foreign.dx, computed_rows_per_peer_, sent_rows_per_peer_);
  Vector<T> dprob_returned(static_cast<Eigen::Index>(sent_positions_.size()));
  ep_.alltoallv<T>(const_span_of(foreign.dprob), computed_rows_per_peer_, span_of(dprob_returned),
                   sent_rows_per_peer_);
  std::vector<int> all_computed(computed_.size());
  for (size_t k = 0; k < computed_.size(); ++k) all_computed[k] = static_cast<int>(k);
  const std::vector<T> wgrad_back = flatten(foreign_grads, all_computed);
  const std::int64_t per_expert = weights.fc1.front().size() + weights.fc2.front().size();
  std::vector<std::int64_t> back_counts(static_cast<size_t>(ep_.size()), 0), recv_counts(back_counts);
  for (const Part& p : computed_) back_counts[size_t(p.peer)] += per_expert;
  for (const Part& p : sent_) recv_counts[size_t(p.peer)] += per_expert;
  std::vector<T> wgrad_recv(sent_.size() * static_cast<size_t>(per_expert));
  ep_.alltoallv<T>(wgrad_back, back_counts, wgrad_recv, recv_counts);

  // The kept rows here (accumulating into grads), then every replica's wgrad added to its owner's.
  const Matrix<T> d_kept = kernels_.gather_rows(d_out, kept_);
  const auto kept = kernels_.grouped_swiglu_backward(kept_x_, kept_sizes_, weights, kept_probs_, options_, kept_pre_,
                                                     d_kept, grads);
  for (size_t k = 0; k < sent_.size(); ++k) {
    const auto i = static_cast<size_t>(sent_[k].expert - first_expert_);
    const T* at = wgrad_recv.data() + k * static_cast<size_t>(per_expert);
    grads.fc1[i] += Eigen::Map<const Matrix<T>>(at, grads.fc1[i].rows(), grads.fc1[i].cols());
    grads.fc2[i] += Eigen::Map<const Matrix<T>>(at + grads.fc1[i].size(), grads.fc2[i].rows(), grads.fc2[i].cols());
  }
  kernels::GroupedSwigluBackward<T> out{Matrix<T>(d_out.rows(), d_out.cols()), Vector<T>(d_out.rows())};
  for (size_t k = 0; k < kept_.size(); ++k) {
    out.dx.row(kept_[k]) = kept.dx.row(static_cast<Eigen::Index>(k));
    out.dprob(kept_[k]) = kept.dprob(static_cast<Eigen::Index>(k));
  }
  for (size_t k = 0; k < sent_positions_.size(); ++k) {
    out.dx.row(sent_positions_[k]) = dx_returned.row(static_cast<Eigen::Index>(k));
    out.dprob(sent_positions_[k]) = dprob_returned(static_cast<Eigen::Index>(k));
  }
  return out;
}

template class ExpertReplicas<double>;
template class ExpertReplicas<float>;

}  // namespace moe::dist
