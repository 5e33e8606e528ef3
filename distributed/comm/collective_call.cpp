#include "distributed/comm/collective_call.hpp"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

using Counts = std::vector<std::int64_t>;

std::string str(std::int64_t v) { return std::to_string(v); }

[[noreturn]] void fail(CollectiveKind kind, const std::string& what) {
  throw std::invalid_argument(std::string(collective_name(kind)) + ": " + what);
}

// Every rank must agree on one scalar property of the call (a size, a root, an op).
template <typename Get, typename Show>
void require_same(std::span<const CollectiveCall> calls, const char* property, Get get, Show show) {
  for (std::size_t r = 1; r < calls.size(); ++r) {
    if (get(calls[r]) != get(calls[0])) {
      fail(calls[0].kind, "rank 0 passes " + show(get(calls[0])) + " but rank " + str(std::int64_t(r)) + " passes " +
                              show(get(calls[r])) + " (" + property + " must match on every rank)");
    }
  }
}

void require_per_peer(const CollectiveCall& c, std::int64_t rank, const Counts& v, const char* name,
                      std::int64_t ranks) {
  if (std::int64_t(v.size()) != ranks) {
    fail(c.kind, "rank " + str(rank) + " passes " + str(std::int64_t(v.size())) + " " + name + " for " + str(ranks) +
                     " ranks (one entry per rank)");
  }
}

// Blocks [displs[j], displs[j] + counts[j]) must lie in a buffer of `size` elements; with `disjoint`, the non-empty
// ones must not overlap either (receive blocks: two peers writing the same element has no defined result).
void require_blocks(const CollectiveCall& c, std::int64_t rank, const Counts& counts, const Counts& displs,
                    std::int64_t size, const char* which, bool disjoint) {
  for (std::size_t j = 0; j < counts.size(); ++j) {
    if (counts[j] < 0 || displs[j] < 0) {
      fail(c.kind, "rank " + str(rank) + " passes a negative count or displacement for its " + which +
                       " block of rank " + str(std::int64_t(j)) + " (counts and displacements are >= 0)");
    }
    if (displs[j] + counts[j] > size) {
      fail(c.kind, "rank " + str(rank) + "'s " + which + " block of rank " + str(std::int64_t(j)) + " [" +
                       str(displs[j]) + ", " + str(displs[j] + counts[j]) + ") exceeds its " + which + " buffer of " +
                       str(size) + " elements");
    }
  }
  if (!disjoint) return;
  std::vector<std::size_t> order(counts.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::erase_if(order, [&](std::size_t j) { return counts[j] == 0; });
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return displs[a] < displs[b]; });
  for (std::size_t i = 1; i < order.size(); ++i) {
    const std::size_t a = order[i - 1], b = order[i];
    if (displs[a] + counts[a] > displs[b]) {
      fail(c.kind, "rank " + str(rank) + "'s " + which + " blocks of ranks " + str(std::int64_t(a)) + " and " +
                       str(std::int64_t(b)) + " overlap (receive blocks must be disjoint)");
    }
  }
}

void check_reduction(std::span<const CollectiveCall> calls) {
  require_same(
      calls, "the reduce op", [](const CollectiveCall& c) { return c.op; },
      [](ReduceOp op) { return std::string(reduce_op_name(op)); });
  if (calls[0].op == ReduceOp::avg && !is_floating(calls[0].type)) {
    fail(calls[0].kind, "ReduceOp::avg on " + std::string(element_type_name(calls[0].type)) +
                            " elements (avg needs a floating-point element type)");
  }
}

void check_broadcast(std::span<const CollectiveCall> calls) {
  const auto ranks = std::int64_t(calls.size());
  require_same(
      calls, "the root", [](const CollectiveCall& c) { return c.root; },
      [](std::int64_t root) { return "root " + str(root); });
  if (calls[0].root < 0 || calls[0].root >= ranks) {
    fail(calls[0].kind, "root " + str(calls[0].root) + " is outside [0, " + str(ranks) + ")");
  }
  require_same(
      calls, "the element count", [](const CollectiveCall& c) { return c.send_size; },
      [](std::int64_t n) { return str(n) + " elements"; });
}

void check_allgatherv(std::span<const CollectiveCall> calls) {
  const auto ranks = std::int64_t(calls.size());
  for (std::int64_t r = 0; r < ranks; ++r) {
    const auto& c = calls[r];
    require_per_peer(c, r, c.recv_counts, "recv_counts", ranks);
    require_per_peer(c, r, c.recv_displs, "recv_displs", ranks);
    require_blocks(c, r, c.recv_counts, c.recv_displs, c.recv_size, "receive", true);
    for (std::int64_t j = 0; j < ranks; ++j) {
      if (c.recv_counts[j] != calls[j].send_size) {
        fail(c.kind, "rank " + str(j) + " sends " + str(calls[j].send_size) + " elements but rank " + str(r) +
                         " expects " + str(c.recv_counts[j]) + " from it (recv_counts must match each sender)");
      }
    }
  }
}

void check_reduce_scatterv(std::span<const CollectiveCall> calls) {
  const auto ranks = std::int64_t(calls.size());
  require_per_peer(calls[0], 0, calls[0].recv_counts, "recv_counts", ranks);
  require_same(
      calls, "recv_counts", [](const CollectiveCall& c) { return c.recv_counts; },
      [](const Counts& v) {
        std::string s = "recv_counts [";
        for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + str(v[i]);
        return s + "]";
      });
  const Counts& counts = calls[0].recv_counts;
  if (std::any_of(counts.begin(), counts.end(), [](std::int64_t n) { return n < 0; })) {
    fail(calls[0].kind, "a negative entry in recv_counts (counts are >= 0)");
  }
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  for (std::int64_t r = 0; r < ranks; ++r) {
    if (calls[r].send_size != total) {
      fail(calls[r].kind, "rank " + str(r) + " sends " + str(calls[r].send_size) +
                              " elements but recv_counts add up to " + str(total) +
                              " (the send buffer is every rank's block back to back)");
    }
    if (calls[r].recv_size != counts[r]) {
      fail(calls[r].kind, "rank " + str(r) + " receives into " + str(calls[r].recv_size) +
                              " elements but its block is " + str(counts[r]) + " (recv_counts[rank])");
    }
  }
}

void check_alltoallv(std::span<const CollectiveCall> calls) {
  const auto ranks = std::int64_t(calls.size());
  for (std::int64_t r = 0; r < ranks; ++r) {
    const auto& c = calls[r];
    require_per_peer(c, r, c.send_counts, "send_counts", ranks);
    require_per_peer(c, r, c.send_displs, "send_displs", ranks);
    require_per_peer(c, r, c.recv_counts, "recv_counts", ranks);
    require_per_peer(c, r, c.recv_displs, "recv_displs", ranks);
    require_blocks(c, r, c.send_counts, c.send_displs, c.send_size, "send", false);
    require_blocks(c, r, c.recv_counts, c.recv_displs, c.recv_size, "receive", true);
  }
  for (std::int64_t r = 0; r < ranks; ++r) {
    for (std::int64_t j = 0; j < ranks; ++j) {
      if (calls[r].send_counts[j] != calls[j].recv_counts[r]) {
        fail(calls[r].kind, "rank " + str(r) + " sends " + str(calls[r].send_counts[j]) + " elements to rank " +
                                str(j) + " but rank " + str(j) + " expects " + str(calls[j].recv_counts[r]) +
                                " (send_counts must match the peer's recv_counts)");
      }
    }
  }
}

void check_sizes(std::span<const CollectiveCall> calls) {
  const auto ranks = std::int64_t(calls.size());
  const CollectiveKind kind = calls[0].kind;
  const auto count = [](std::int64_t n) { return str(n) + " elements"; };
  if (kind == CollectiveKind::allreduce || kind == CollectiveKind::allgather) {
    require_same(
        calls, "the element count", [](const CollectiveCall& c) { return c.send_size; }, count);
  }
  if (kind == CollectiveKind::reduce_scatter) {
    require_same(
        calls, "the block size", [](const CollectiveCall& c) { return c.recv_size; }, count);
  }
  for (std::int64_t r = 0; r < ranks; ++r) {
    const auto& c = calls[r];
    const std::int64_t want = kind == CollectiveKind::allreduce        ? c.send_size
                              : kind == CollectiveKind::allgather      ? ranks * c.send_size
                              : kind == CollectiveKind::reduce_scatter ? c.send_size / ranks
                                                                       : c.recv_size;
    const bool divisible = kind != CollectiveKind::reduce_scatter || c.send_size % ranks == 0;
    if (c.recv_size != want || !divisible) {
      const std::string rule = kind == CollectiveKind::allreduce   ? "the receive buffer is as long as the send buffer"
                               : kind == CollectiveKind::allgather ? "the receive buffer holds size() sends"
                                                                   : "the send buffer holds size() blocks";
      fail(kind, "rank " + str(r) + " sends " + str(c.send_size) + " and receives " + str(c.recv_size) +
                     " elements on " + str(ranks) + " ranks (" + rule + ")");
    }
  }
}

}  // namespace

std::string_view collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::barrier: return "barrier";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::allreduce: return "allreduce";
    case CollectiveKind::allgather: return "allgather";
    case CollectiveKind::allgatherv: return "allgatherv";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::reduce_scatterv: return "reduce_scatterv";
    case CollectiveKind::alltoallv: return "alltoallv";
    case CollectiveKind::split: break;
  }
  return "split";
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: return "sum";
    case ReduceOp::avg: return "avg";
    case ReduceOp::max: return "max";
    case ReduceOp::min: break;
  }
  return "min";
}

void check_same_alltoallv_form(const std::vector<bool>& indexed) {
  for (std::size_t r = 1; r < indexed.size(); ++r)
    if (indexed[r] != indexed[0])
      throw std::invalid_argument("ranks disagree: rank " + str(std::int64_t(indexed[0] ? 0 : r)) +
                                  " runs alltoallv_indexed and rank " + str(std::int64_t(indexed[0] ? r : 0)) +
                                  " a plain alltoallv of the same counts");
}

// Layout: 10 scalars, then each per-peer vector as its length followed by its entries.
std::vector<std::int64_t> encode(const CollectiveCall& c) {
  std::vector<std::int64_t> w{
      std::int64_t(c.kind), std::int64_t(c.type), std::int64_t(c.op), c.root,           c.color, c.key,
      c.send_size,          c.recv_size,          c.in_place,         c.buffers_overlap};
  for (const Counts* v : {&c.send_counts, &c.send_displs, &c.recv_counts, &c.recv_displs}) {
    w.push_back(std::int64_t(v->size()));
    w.insert(w.end(), v->begin(), v->end());
  }
  return w;
}

CollectiveCall decode(std::span<const std::int64_t> w) {
  constexpr std::size_t scalars = 10;
  const auto malformed = [] { return std::invalid_argument("decode: malformed collective call"); };
  if (w.size() < scalars) throw malformed();
  const auto in_range = [](std::int64_t v, std::int64_t last) { return v >= 0 && v <= last; };
  if (!in_range(w[0], std::int64_t(CollectiveKind::split)) || !in_range(w[1], std::int64_t(ElementType::i32)) ||
      !in_range(w[2], std::int64_t(ReduceOp::min)) || !in_range(w[8], 1) || !in_range(w[9], 1)) {
    throw malformed();
  }
  CollectiveCall c;
  c.kind = CollectiveKind(w[0]);
  c.type = ElementType(w[1]);
  c.op = ReduceOp(w[2]);
  c.root = w[3];
  c.color = w[4];
  c.key = w[5];
  c.send_size = w[6];
  c.recv_size = w[7];
  c.in_place = w[8] != 0;
  c.buffers_overlap = w[9] != 0;
  std::size_t at = scalars;
  for (Counts* v : {&c.send_counts, &c.send_displs, &c.recv_counts, &c.recv_displs}) {
    if (at >= w.size() || w[at] < 0 || std::size_t(w[at]) > w.size() - at - 1) throw malformed();
    const auto n = std::size_t(w[at++]);
    v->assign(w.begin() + std::ptrdiff_t(at), w.begin() + std::ptrdiff_t(at + n));
    at += n;
  }
  if (at != w.size()) throw malformed();
  return c;
}

void check_calls(std::span<const CollectiveCall> calls) {
  if (calls.empty()) throw std::invalid_argument("check_calls: no calls (a communicator has at least one rank)");
  const CollectiveKind kind = calls[0].kind;
  for (std::size_t r = 1; r < calls.size(); ++r) {
    if (calls[r].kind != kind) {
      throw std::invalid_argument("collective mismatch: rank 0 calls " + std::string(collective_name(kind)) +
                                  " but rank " + str(std::int64_t(r)) + " calls " +
                                  std::string(collective_name(calls[r].kind)) +
                                  " (every rank must call the same collectives in the same order)");
    }
  }
  if (kind == CollectiveKind::barrier) return;
  if (kind == CollectiveKind::split) {
    for (std::size_t r = 0; r < calls.size(); ++r) {
      if (calls[r].color < 0) {
        fail(kind, "rank " + str(std::int64_t(r)) + " passes color " + str(calls[r].color) +
                       " (colors are >= 0; every rank joins one sub-communicator)");
      }
    }
    return;
  }
  require_same(
      calls, "the element type", [](const CollectiveCall& c) { return c.type; },
      [](ElementType t) { return std::string(element_type_name(t)) + " elements"; });
  for (std::size_t r = 0; r < calls.size(); ++r) {
    if (calls[r].buffers_overlap) {
      fail(kind, "rank " + str(std::int64_t(r)) +
                     "'s send and receive buffers overlap (they must be disjoint unless the call is in place)");
    }
  }
  switch (kind) {
    case CollectiveKind::broadcast: check_broadcast(calls); break;
    case CollectiveKind::allreduce:
    case CollectiveKind::reduce_scatter:
      check_reduction(calls);
      check_sizes(calls);
      break;
    case CollectiveKind::allgather: check_sizes(calls); break;
    case CollectiveKind::allgatherv: check_allgatherv(calls); break;
    case CollectiveKind::reduce_scatterv:
      check_reduction(calls);
      check_reduce_scatterv(calls);
      break;
    case CollectiveKind::alltoallv: check_alltoallv(calls); break;
    case CollectiveKind::barrier:
    case CollectiveKind::split: break;
  }
}

}  // namespace moe
