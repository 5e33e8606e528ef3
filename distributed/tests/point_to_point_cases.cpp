// Conformance cases for send / recv: matching by (source, tag), send order within a tag, empty messages, sends
// to oneself, and the buffered-send promise (every rank sends everything before it receives anything).
#include "distributed/tests/conformance_support.hpp"

namespace moe::conformance {
namespace {

// Rank r sends (r + 2) % 3 elements to the next rank: rank 1's message is empty.
template <CommElement T>
Tally ring_case(Communicator& comm) {
  const int r = comm.rank(), ranks = comm.size();
  const int to = (r + 1) % ranks, from = (r + ranks - 1) % ranks;
  std::vector<T> out(std::size_t((r + 2) % 3)), in(std::size_t((from + 2) % 3), sentinel<T>), want(in.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = value<T>(r, to, std::int64_t(i));
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = value<T>(from, r, std::int64_t(i));
  comm.send<T>(out, to, 5);
  comm.recv<T>(in, from, 5);
  return compare(in, want);
}

// Three messages to the next rank, tag 2 first, then two with tag 1; received tag 1, tag 1, tag 2.
Tally tags_case(Communicator& comm) {
  const int r = comm.rank(), ranks = comm.size();
  const int to = (r + 1) % ranks, from = (r + ranks - 1) % ranks;
  const auto block = [](int src, int dst, std::int64_t first, std::int64_t n) {
    auto v = filled<float>(n);
    for (std::int64_t i = 0; i < n; ++i) v[i] = value<float>(src, dst, first + i);
    return v;
  };
  comm.send<float>(block(r, to, 0, 3), to, 2);
  comm.send<float>(block(r, to, 10, 2), to, 1);
  comm.send<float>(block(r, to, 20, 1), to, 1);
  Tally t;
  for (const auto& [tag, first, n] : {std::tuple{1, 10, 2}, std::tuple{1, 20, 1}, std::tuple{2, 0, 3}}) {
    auto in = filled<float>(n, sentinel<float>);
    comm.recv<float>(in, from, tag);
    t += compare(in, block(from, r, first, n));
  }
  return t;
}

// Everyone sends to everyone, itself included, before receiving; then receives in reverse rank order.
Tally all_pairs_case(Communicator& comm) {
  const int r = comm.rank(), ranks = comm.size();
  for (int d = 0; d < ranks; ++d) {
    std::vector<std::int64_t> out(std::size_t(d + 1));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = value<std::int64_t>(r, d, std::int64_t(i));
    comm.send<std::int64_t>(out, d, r);
  }
  Tally t;
  for (int s = ranks - 1; s >= 0; --s) {
    std::vector<std::int64_t> in(std::size_t(r + 1), sentinel<std::int64_t>), want(in.size());
    for (std::size_t i = 0; i < want.size(); ++i) want[i] = value<std::int64_t>(s, r, std::int64_t(i));
    comm.recv<std::int64_t>(in, s, s);
    t += compare(in, want);
  }
  return t;
}

}  // namespace

void add_point_to_point_cases(std::vector<Case>& cases, int) {
  cases.push_back({"send_recv.ring.f64", ring_case<double>});
  cases.push_back({"send_recv.ring.i32", ring_case<std::int32_t>});
  cases.push_back({"send_recv.tags", tags_case});
  cases.push_back({"send_recv.all_pairs", all_pairs_case});
}

}  // namespace moe::conformance
