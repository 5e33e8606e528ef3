// Conformance cases for the rules that must throw. A broken call must throw std::invalid_argument whose message
// names the rule, on every rank involved (so no rank is left waiting), and leave the communicator usable.
#include "distributed/tests/conformance_support.hpp"

#include <algorithm>
#include <stdexcept>
#include <string_view>

namespace moe::conformance {
namespace {

using I64 = std::vector<std::int64_t>;

// One check for the throw, one for an allreduce afterwards. Ranks that take no part in the broken call (a
// mismatched recv) pass involved = false: they only check the allreduce.
template <typename F>
Tally expect_rule(Communicator& comm, std::string_view rule, F&& broken_call, bool involved = true) {
  Tally t;
  if (involved) {
    t.checked = 1;
    try {
      broken_call();
      t.wrong = 1;
    } catch (const std::invalid_argument& e) {
      t.wrong = std::string_view(e.what()).find(rule) == std::string_view::npos ? 1 : 0;
    }
  }
  I64 one{1};
  comm.allreduce<std::int64_t>(std::span(one), ReduceOp::sum);
  return t += compare(one, I64{comm.size()});
}

void add(std::vector<Case>& cases, std::string name, std::string rule, std::function<void(Communicator&)> broken_call) {
  cases.push_back({std::move(name), [rule = std::move(rule), broken_call = std::move(broken_call)](Communicator& c) {
                     return expect_rule(c, rule, [&] { broken_call(c); });
                   }});
}

// Calls every rank gets wrong alike; they need no second rank.
void add_single_rank_rules(std::vector<Case>& cases) {
  add(cases, "error.calls.allgather_recv_size", "the receive buffer holds size() sends", [](Communicator& c) {
    I64 send{1}, recv(std::size_t(c.size() + 1));
    c.allgather<std::int64_t>(send, recv);
  });
  add(cases, "error.calls.broadcast_root", "is outside", [](Communicator& c) {
    I64 data{1};
    c.broadcast<std::int64_t>(data, c.size());
  });
  add(cases, "error.calls.avg_on_integers", "avg needs a floating-point element type", [](Communicator& c) {
    I64 data{1};
    c.allreduce<std::int64_t>(std::span(data), ReduceOp::avg);
  });
  add(cases, "error.calls.overlapping_buffers", "buffers overlap", [](Communicator& c) {
    std::vector<double> buffer(3);
    c.allreduce<double>(std::span(buffer).first(2), std::span(buffer).last(2), ReduceOp::sum);
  });
  add(cases, "error.calls.reduce_scatterv_send_size", "every rank's block back to back", [](Communicator& c) {
    const I64 counts(std::size_t(c.size()), 1);
    std::vector<double> send(std::size_t(c.size() + 1)), recv(1);
    c.reduce_scatterv<double>(send, recv, counts, ReduceOp::sum);
  });
  add(cases, "error.calls.alltoallv_block_outside", "exceeds its send buffer", [](Communicator& c) {
    const I64 counts(std::size_t(c.size()), 1), displs(std::size_t(c.size()), 0), recv_displs = prefix_sum(counts);
    std::vector<float> send(std::size_t(c.size())), recv(std::size_t(c.size()));
    I64 send_displs = displs;
    send_displs.back() = c.size();  // the block to the last rank starts past the end
    c.alltoallv<float>(send, counts, send_displs, recv, counts, recv_displs);
  });
  add(cases, "error.calls.split_color", "colors are >= 0", [](Communicator& c) { c.split(-1, 0); });
  add(cases, "error.args.send_rank", "destination rank", [](Communicator& c) {
    const I64 data{1};
    c.send<std::int64_t>(data, c.size(), 0);
  });
  add(cases, "error.args.recv_rank", "source rank", [](Communicator& c) {
    I64 data{1};
    c.recv<std::int64_t>(data, -1, 0);
  });
  add(cases, "error.args.tag", "tag", [](Communicator& c) {
    const I64 data{1};
    c.send<std::int64_t>(data, 0, Communicator::max_tag + 1);
  });
  add(cases, "error.args.subgroup_without_self", "holds the caller's own rank", [](Communicator& c) {
    std::vector<int> others;  // the next rank, or nobody on one rank
    if (c.size() > 1) others.push_back((c.rank() + 1) % c.size());
    c.subgroup(others);
  });
}

// Calls that disagree across ranks.
void add_cross_rank_rules(std::vector<Case>& cases) {
  add(cases, "error.calls.allreduce_counts", "element count must match", [](Communicator& c) {
    std::vector<double> data(c.rank() == 0 ? 3 : 2);
    c.allreduce<double>(std::span(data), ReduceOp::sum);
  });
  add(cases, "error.calls.element_types", "element type must match", [](Communicator& c) {
    if (c.rank() == 0) {
      std::vector<double> data(2);
      c.allreduce<double>(std::span(data), ReduceOp::sum);
    } else {
      std::vector<float> data(2);
      c.allreduce<float>(std::span(data), ReduceOp::sum);
    }
  });
  add(cases, "error.calls.different_collectives", "collective mismatch", [](Communicator& c) {
    I64 data{1}, all(std::size_t(c.size()));
    if (c.rank() == 0)
      c.allgather<std::int64_t>(data, all);
    else
      c.allreduce<std::int64_t>(std::span(data), ReduceOp::sum);
  });
  add(cases, "error.calls.split_versus_barrier", "collective mismatch", [](Communicator& c) {
    if (c.rank() == 0)
      c.split(0, 0);
    else
      c.barrier();
  });
  add(cases, "error.calls.broadcast_roots", "root must match", [](Communicator& c) {
    I64 data{1};
    c.broadcast<std::int64_t>(data, c.rank() % 2);
  });
  add(cases, "error.calls.alltoallv_counts", "send_counts must match the peer's recv_counts", [](Communicator& c) {
    I64 send_counts(std::size_t(c.size()), 1);
    const I64 recv_counts(std::size_t(c.size()), 1);
    if (c.rank() == 0) send_counts[1] = 2;
    std::vector<double> send(std::size_t(c.size() + 1)), recv(std::size_t(c.size()));
    c.alltoallv<double>(send, send_counts, recv, recv_counts);
  });
  add(cases, "error.calls.alltoallv_indexed_versus_plain", "runs alltoallv_indexed and rank", [](Communicator& c) {
    const I64 ones(std::size_t(c.size()), 1);
    std::vector<double> send(std::size_t(c.size())), recv(std::size_t(c.size()));
    if (c.rank() == 1) {
      c.alltoallv<double>(send, ones, recv, ones);
    } else {
      RowBlocks rows{ones, prefix_sum(ones)};
      c.alltoallv_indexed<double>(send, rows, recv, rows, 1, RowLanding::copy);
    }
  });
  // A call longer than the slot MPI gathers calls in (counts for far more ranks than there are) takes the second
  // round; the rule is the usual one.
  add(cases, "error.calls.alltoallv_counts_length", "ranks (one entry per rank)", [](Communicator& c) {
    const I64 counts(std::size_t(c.rank() == 0 ? 8 * c.size() + 32 : c.size()), 0);
    std::vector<double> send(1), recv(1);
    c.alltoallv<double>(send, counts, recv, counts);
  });
  add(cases, "error.calls.alltoallv_recv_overlap", "overlap (receive blocks must be disjoint)", [](Communicator& c) {
    const I64 counts(std::size_t(c.size()), 1), displs = prefix_sum(counts), zeros(std::size_t(c.size()), 0);
    std::vector<std::int32_t> send(std::size_t(c.size())), recv(std::size_t(c.size()));
    c.alltoallv<std::int32_t>(send, counts, displs, recv, counts, zeros);
  });
  add(cases, "error.calls.allgatherv_counts", "recv_counts must match each sender", [](Communicator& c) {
    I64 counts(std::size_t(c.size()), 1);
    if (c.rank() == 1) counts[0] = 2;
    std::vector<float> send(1), recv(std::size_t(c.size() + 1));
    c.allgatherv<float>(send, recv, counts);
  });
  add(cases, "error.calls.reduce_scatterv_counts", "recv_counts must match on every rank", [](Communicator& c) {
    I64 counts(std::size_t(c.size()), 1);
    if (c.rank() == 0) counts = I64(std::size_t(c.size()), 0);
    std::vector<double> send(std::size_t(c.size())), recv(static_cast<std::size_t>(counts[c.rank()]));
    c.reduce_scatterv<double>(send, recv, counts, ReduceOp::sum);
  });
  add(cases, "error.args.subgroup_lists_disagree", "every member of a group passes the same list", [](Communicator& c) {
    c.subgroup(c.rank() == 0 ? std::vector<int>{0, 1} : std::vector<int>{c.rank()});
  });
  // The same members in another order on one rank: the order ranks the group, so it must agree too.
  add(cases, "error.args.subgroup_orders_disagree", "every member of a group passes the same list", [](Communicator& c) {
    std::vector<int> all(std::size_t(c.size()));
    for (int r = 0; r < c.size(); ++r) all[std::size_t(r)] = r;
    if (c.rank() == c.size() - 1) std::reverse(all.begin(), all.end());
    c.subgroup(all);
  });
  // Only the receiver learns the length is wrong; the others just check the communicator afterwards.
  cases.push_back({"error.calls.recv_length", [](Communicator& c) {
                     if (c.rank() == 0) c.send<double>(std::vector<double>(3), 1, 9);
                     return expect_rule(
                         c, "a message must fill the receive buffer exactly",
                         [&] {
                           std::vector<double> in(2);
                           c.recv<double>(in, 0, 9);
                         },
                         c.rank() == 1);
                   }});
}

}  // namespace

void add_error_cases(std::vector<Case>& cases, int size) {
  add_single_rank_rules(cases);
  if (size >= 2) add_cross_rank_rules(cases);
}

}  // namespace moe::conformance
