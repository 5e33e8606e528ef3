// Conformance cases for the data collectives, for every element type. Counts are crafted to include zero-sized
// blocks and ranks, and displacements that are not prefix sums (reversed order, gaps), so an implementation that
// assumes contiguous or uniform layouts writes where it must not.
#include "distributed/tests/conformance_support.hpp"

#include <algorithm>
#include <concepts>
#include <functional>

namespace moe::conformance {
namespace {

// Small integers of both signs: sums are exact in every type, and max/min are won by different ranks.
template <CommElement T>
T mixed(int src, std::int64_t i) {
  return T((src * 7 + i * 3) % 11) - T(5);
}

// Non-dyadic values of spread magnitudes: a sum taken in another order than 0, 1, …, size-1 changes low bits.
template <std::floating_point T>
T awkward(int src, std::int64_t i) {
  return T(1.0 / double(3 + src + i % 7)) * T((src % 2 == 0 ? 1 : -1) * (1 + (src * i) % 13 * 1000));
}

template <CommElement T>
std::vector<ReduceOp> ops() {
  if constexpr (std::floating_point<T>)
    return {ReduceOp::sum, ReduceOp::avg, ReduceOp::max, ReduceOp::min};
  else
    return {ReduceOp::sum, ReduceOp::max, ReduceOp::min};
}

// The prediction for a reduction: inputs combined in rank order in T, the order the backends promise.
template <CommElement T>
T reduced(ReduceOp op, int ranks, const std::function<T(int)>& input) {
  T acc = input(0);
  for (int s = 1; s < ranks; ++s) {
    const T x = input(s);
    if (op == ReduceOp::max)
      acc = std::max(acc, x);
    else if (op == ReduceOp::min)
      acc = std::min(acc, x);
    else
      acc += x;
  }
  if constexpr (std::floating_point<T>) {
    if (op == ReduceOp::avg) acc /= T(ranks);
  }
  return acc;
}

Tally identity_case(Communicator& comm) {
  const std::int64_t me = comm.rank();
  auto ranks = filled<std::int64_t>(comm.size(), -1), want = filled<std::int64_t>(comm.size());
  for (std::size_t r = 0; r < want.size(); ++r) want[r] = std::int64_t(r);
  comm.allgather<std::int64_t>(std::span(&me, 1), ranks);
  return compare(ranks, want);
}

template <CommElement T>
Tally broadcast_case(Communicator& comm) {
  Tally t;
  for (std::int64_t n : {0, 1, 37}) {
    for (int root = 0; root < comm.size(); ++root) {
      auto data = filled<T>(n), want = filled<T>(n);
      for (std::int64_t i = 0; i < n; ++i) {
        want[i] = value<T>(root, 0, i);
        data[i] = comm.rank() == root ? want[i] : sentinel<T>;
      }
      comm.broadcast<T>(data, root);
      t += compare(data, want);
    }
  }
  return t;
}

// Sizes below size() leave some ranks without a chunk in backends that split the work.
template <CommElement T>
Tally allreduce_case(Communicator& comm, ReduceOp op) {
  Tally t;
  for (std::int64_t n : {0, 1, 7, 1001}) {
    auto send = filled<T>(n), want = filled<T>(n), recv = filled<T>(n, sentinel<T>);
    for (std::int64_t i = 0; i < n; ++i) {
      send[i] = mixed<T>(comm.rank(), i);
      want[i] = reduced<T>(op, comm.size(), [i](int s) { return mixed<T>(s, i); });
    }
    comm.allreduce<T>(send, recv, op);
    t += compare(recv, want);
    comm.allreduce<T>(std::span<T>(send), op);
    t += compare(send, want);
  }
  return t;
}

template <std::floating_point T>
Tally rank_order_case(Communicator& comm) {
  const std::int64_t n = 1001;
  auto send = filled<T>(n), want = filled<T>(n), recv = filled<T>(n);
  for (std::int64_t i = 0; i < n; ++i) {
    send[i] = awkward<T>(comm.rank(), i);
    want[i] = reduced<T>(ReduceOp::sum, comm.size(), [i](int s) { return awkward<T>(s, i); });
  }
  comm.allreduce<T>(send, recv, ReduceOp::sum);
  return compare(recv, want);
}

template <CommElement T>
Tally allgather_case(Communicator& comm) {
  Tally t;
  for (std::int64_t n : {0, 3}) {
    auto send = filled<T>(n), recv = filled<T>(n * comm.size(), sentinel<T>), want = filled<T>(n * comm.size());
    for (std::int64_t i = 0; i < n; ++i) send[i] = value<T>(comm.rank(), 0, i);
    for (int s = 0; s < comm.size(); ++s) {
      for (std::int64_t i = 0; i < n; ++i) want[s * n + i] = value<T>(s, 0, i);
    }
    comm.allgather<T>(send, recv);
    t += compare(recv, want);
  }
  return t;
}

// Uneven counts (rank 1 and every fourth after it contribute nothing). The first call places the blocks in
// reverse rank order with a one-element gap after each; the second uses the back-to-back overload.
template <CommElement T>
Tally allgatherv_case(Communicator& comm) {
  const int ranks = comm.size();
  auto counts = filled<std::int64_t>(ranks), displs = filled<std::int64_t>(ranks);
  std::int64_t end = 0;
  for (int s = ranks - 1; s >= 0; --s) {
    counts[s] = (3 * s + 1) % 4;
    displs[s] = end;
    end += counts[s] + 1;
  }
  auto send = filled<T>(counts[comm.rank()]);
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = value<T>(comm.rank(), 0, std::int64_t(i));

  auto recv = filled<T>(end, sentinel<T>), want = recv;
  for (int s = 0; s < ranks; ++s) {
    for (std::int64_t i = 0; i < counts[s]; ++i) want[displs[s] + i] = value<T>(s, 0, i);
  }
  comm.allgatherv<T>(send, recv, counts, displs);
  Tally t = compare(recv, want);

  const std::vector<std::int64_t> packed = prefix_sum(counts);
  auto recv_packed = filled<T>(packed.back() + counts.back(), sentinel<T>), want_packed = recv_packed;
  for (int s = 0; s < ranks; ++s) {
    for (std::int64_t i = 0; i < counts[s]; ++i) want_packed[packed[s] + i] = value<T>(s, 0, i);
  }
  comm.allgatherv<T>(send, recv_packed, counts);
  return t += compare(recv_packed, want_packed);
}

// Block j of rank s's send buffer holds mixed(5s + j, ·); rank j receives it reduced over s.
template <CommElement T>
Tally reduce_scatter_case(Communicator& comm) {
  Tally t;
  const int me = comm.rank(), ranks = comm.size();
  for (std::int64_t b : {0, 5}) {
    for (ReduceOp op : ops<T>()) {
      auto send = filled<T>(b * ranks), recv = filled<T>(b, sentinel<T>), want = filled<T>(b);
      for (int j = 0; j < ranks; ++j) {
        for (std::int64_t i = 0; i < b; ++i) send[j * b + i] = mixed<T>(5 * me + j, i);
      }
      for (std::int64_t i = 0; i < b; ++i) {
        want[i] = reduced<T>(op, ranks, [&](int s) { return mixed<T>(5 * s + me, i); });
      }
      comm.reduce_scatter<T>(send, recv, op);
      t += compare(recv, want);
    }
  }
  return t;
}

// Block sizes 2, 0, 1, 2, 0, …: rank 1 (and every third after it) keeps nothing.
template <CommElement T>
Tally reduce_scatterv_case(Communicator& comm) {
  Tally t;
  const int me = comm.rank(), ranks = comm.size();
  auto counts = filled<std::int64_t>(ranks);
  for (int j = 0; j < ranks; ++j) counts[j] = (j + 2) % 3;
  const std::vector<std::int64_t> displs = prefix_sum(counts);
  for (ReduceOp op : ops<T>()) {
    auto send = filled<T>(displs.back() + counts.back());
    for (int j = 0; j < ranks; ++j) {
      for (std::int64_t i = 0; i < counts[j]; ++i) send[displs[j] + i] = mixed<T>(5 * me + j, i);
    }
    auto recv = filled<T>(counts[me], sentinel<T>), want = filled<T>(counts[me]);
    for (std::int64_t i = 0; i < counts[me]; ++i) {
      want[i] = reduced<T>(op, ranks, [&](int s) { return mixed<T>(5 * s + me, i); });
    }
    comm.reduce_scatterv<T>(send, recv, counts, op);
    t += compare(recv, want);
  }
  return t;
}

// Rank s sends count(s, d) elements value(s, d, ·) to rank d. Send blocks sit in reverse destination order with
// two-element gaps, receive blocks in rank order with one-element gaps that must keep the sentinel.
template <CommElement T>
Tally alltoallv_case(Communicator& comm, const std::function<std::int64_t(int, int)>& count, bool packed) {
  const int me = comm.rank(), ranks = comm.size();
  auto send_counts = filled<std::int64_t>(ranks), send_displs = send_counts;
  auto recv_counts = send_counts, recv_displs = send_counts;
  const std::int64_t send_gap = packed ? 0 : 2, recv_gap = packed ? 0 : 1;
  std::int64_t send_end = 0, recv_end = 0;
  for (int d = ranks - 1; d >= 0; --d) {
    send_counts[d] = count(me, d);
    send_displs[d] = send_end;
    send_end += send_counts[d] + send_gap;
  }
  if (packed) send_displs = prefix_sum(send_counts);
  for (int s = 0; s < ranks; ++s) {
    recv_counts[s] = count(s, me);
    recv_displs[s] = recv_end;
    recv_end += recv_counts[s] + recv_gap;
  }
  auto send = filled<T>(send_end, sentinel<T>), recv = filled<T>(recv_end, sentinel<T>), want = recv;
  for (int d = 0; d < ranks; ++d) {
    for (std::int64_t i = 0; i < send_counts[d]; ++i) send[send_displs[d] + i] = value<T>(me, d, i);
  }
  for (int s = 0; s < ranks; ++s) {
    for (std::int64_t i = 0; i < recv_counts[s]; ++i) want[recv_displs[s] + i] = value<T>(s, me, i);
  }
  if (packed)
    comm.alltoallv<T>(send, send_counts, recv, recv_counts);
  else
    comm.alltoallv<T>(send, send_counts, send_displs, recv, recv_counts, recv_displs);
  return compare(recv, want);
}

template <CommElement T>
void add_typed(std::vector<Case>& cases) {
  const std::string t = type_name<T>();
  cases.push_back({"broadcast." + t, broadcast_case<T>});
  for (ReduceOp op : ops<T>()) {
    cases.push_back({"allreduce." + std::string(reduce_op_name(op)) + "." + t,
                     [op](Communicator& c) { return allreduce_case<T>(c, op); }});
  }
  if constexpr (std::floating_point<T>) cases.push_back({"allreduce.rank_order." + t, rank_order_case<T>});
  cases.push_back({"allgather." + t, allgather_case<T>});
  cases.push_back({"allgatherv." + t, allgatherv_case<T>});
  cases.push_back({"reduce_scatter." + t, reduce_scatter_case<T>});
  cases.push_back({"reduce_scatterv." + t, reduce_scatterv_case<T>});
  cases.push_back({"alltoallv." + t, [](Communicator& c) {
                     return alltoallv_case<T>(
                         c, [](int s, int d) { return std::int64_t((s + 2 * d + 1) % 4); }, false);
                   }});
  cases.push_back({"alltoallv.packed." + t, [](Communicator& c) {
                     return alltoallv_case<T>(
                         c, [](int s, int d) { return std::int64_t((s + d + 1) % 3); }, true);
                   }});
}

}  // namespace

void add_collective_cases(std::vector<Case>& cases, int size) {
  cases.push_back({"identity", identity_case});
  add_typed<double>(cases);
  add_typed<float>(cases);
  add_typed<std::int64_t>(cases);
  add_typed<std::int32_t>(cases);
  // The last rank routes no tokens and receives none (a zero-token rank): it passes empty buffers.
  if (size < 2) return;
  cases.push_back({"alltoallv.zero_token_rank.f64", [](Communicator& c) {
                     const int zero = c.size() - 1;
                     return alltoallv_case<double>(
                         c, [zero](int s, int d) { return s == zero || d == zero ? 0 : std::int64_t(2 + (s + d) % 2); },
                         true);
                   }});
}

}  // namespace moe::conformance
