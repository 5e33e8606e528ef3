// Conformance cases for alltoallv_indexed (row_exchange.hpp): rows picked by index on both sides, copied or added.
// Every element of every receive buffer is predicted from the description alone: rank s's send buffer holds
// rows whose elements are value(s, row, column); the rows it sends to d, their order, and where each lands are
// formulas of (s, d, k), so each rank computes what every peer sends it without asking.
#include "distributed/tests/conformance_support.hpp"

#include <concepts>
#include <stdexcept>

namespace moe::conformance {
namespace {

constexpr std::int64_t kWidth = 3;
constexpr std::int64_t kSendRows = 5;

std::int64_t rows_between(int s, int d) { return (s + 2 * d + 1) % 4; }     // zero for some pairs

// Runs of consecutive rows on one side only (a backend may read each side's runs as one piece): remote, the
// senders' rows come in runs and land reversed; local, scattered rows land in rising order. repeats: each row is
// sent twice running to a peer (a backend may read it once).
enum class Runs { none, remote, local, repeats };

// The k-th row rank s sends d (rows repeat across peers; with groups, also within one).
std::int64_t sent_row(int s, int d, std::int64_t k, Runs runs = Runs::none) {
  const std::int64_t step = runs == Runs::remote ? k : runs == Runs::repeats ? k / 2 : 3 * k;
  return (step + s + 2 * d) % kSendRows;
}

// Element c of send row r on rank s. Floating types get non-dyadic values, so that sums in another order than
// (source rank, position) change low bits.
template <CommElement T>
T element(int s, std::int64_t r, std::int64_t c) {
  if constexpr (std::floating_point<T>)
    return T(1.0 / double(3 + s + 2 * r + c)) * T(1 + 100 * ((s + r) % 5));
  else
    return value<T>(s, int(r), c);
}

template <CommElement T>
std::vector<T> send_buffer(int s, std::int64_t width) {
  auto send = filled<T>(kSendRows * width);
  for (std::int64_t r = 0; r < kSendRows; ++r)
    for (std::int64_t c = 0; c < width; ++c) send[std::size_t(r * width + c)] = element<T>(s, r, c);
  return send;
}

// With groups: entry k to d is the sum of the sent rows k, k + 1, … (one to three of them).
std::int64_t group_size(int s, int d, std::int64_t k) { return 1 + (s + d + k) % 3; }

RowBlocks sends_of(int me, int ranks, bool groups, Runs runs) {
  RowBlocks to;
  if (groups) to.starts.push_back(0);
  for (int d = 0; d < ranks; ++d) {
    to.counts.push_back(rows_between(me, d));
    for (std::int64_t k = 0; k < to.counts.back(); ++k) {
      for (std::int64_t m = 0; m < (groups ? group_size(me, d, k) : 1); ++m)
        to.rows.push_back(sent_row(me, d, k + m, runs));
      if (groups) to.starts.push_back(std::int64_t(to.rows.size()));
    }
  }
  return to;
}

// What rank s sends d as its k-th row: one row, or its group summed left to right.
template <CommElement T>
T sent_value(int s, int d, std::int64_t k, std::int64_t c, bool groups, Runs runs) {
  T x = element<T>(s, sent_row(s, d, k, runs), c);
  for (std::int64_t m = 1; groups && m < group_size(s, d, k); ++m)
    x = T(x + element<T>(s, sent_row(s, d, k + m, runs), c));
  return x;
}

struct Shape {
  bool sends = false;     // senders sum groups of rows
  bool landings = false;  // each received row lands in one or two rows (copy)
  Runs runs = Runs::none;
};

// The p-th incoming row (in source order) lands at landing(p, n) of a receive buffer of `recv_rows` rows. Wide
// rows (128 KiB) make a backend that sums a few rows at a time (the MPI single-copy path) use several pieces.
template <CommElement T>
Tally indexed_case(Communicator& comm, RowLanding landing, std::int64_t width = kWidth, Shape groups = {}) {
  const int me = comm.rank(), ranks = comm.size();
  std::int64_t incoming = 0;
  for (int s = 0; s < ranks; ++s) incoming += rows_between(s, me);
  // copy: reversed (rising with Runs::local), with a sentinel row before and after (row p in 1 + p % 2 places
  // with landing groups); add: everything onto two rows (and one left alone).
  RowBlocks from;
  for (int s = 0; s < ranks; ++s) from.counts.push_back(rows_between(s, me));
  std::int64_t places = 0;
  for (std::int64_t p = 0; p < incoming; ++p) places += groups.landings ? 1 + p % 2 : 1;
  const std::int64_t recv_rows = landing == RowLanding::copy ? places + 2 : 3;
  if (groups.landings) from.starts.push_back(0);
  for (std::int64_t p = 0; p < incoming; ++p) {
    for (std::int64_t g = 0; g < (groups.landings ? 1 + p % 2 : 1); ++g)
      from.rows.push_back(landing == RowLanding::add         ? p % 2
                          : groups.runs == Runs::local ? 1 + std::int64_t(from.rows.size())
                                                       : places - std::int64_t(from.rows.size()));
    if (groups.landings) from.starts.push_back(std::int64_t(from.rows.size()));
  }

  auto recv = filled<T>(recv_rows * width, sentinel<T>), want = recv;
  std::int64_t p = 0;
  for (int s = 0; s < ranks; ++s)
    for (std::int64_t k = 0; k < rows_between(s, me); ++k, ++p)
      for (const auto at : from.group(std::size_t(p)))
        for (std::int64_t c = 0; c < width; ++c) {
          T& w = want[std::size_t(at * width + c)];
          const T x = sent_value<T>(s, me, k, c, groups.sends, groups.runs);
          w = landing == RowLanding::copy ? x : T(w + x);
        }
  const auto send = send_buffer<T>(me, width);
  comm.alltoallv_indexed<T>(send, sends_of(me, ranks, groups.sends, groups.runs), recv, from, width, landing);
  return compare(recv, want);
}

template <typename F>
Tally expect_throw(Communicator& comm, std::string_view rule, F&& broken_call) {
  Tally t{1, 1};
  try {
    broken_call();
  } catch (const std::invalid_argument& e) {
    t.wrong = std::string_view(e.what()).find(rule) == std::string_view::npos ? 1 : 0;
  }
  std::vector<std::int64_t> one{1};
  comm.allreduce<std::int64_t>(std::span(one), ReduceOp::sum);
  return t += compare(one, std::vector<std::int64_t>{comm.size()});
}

// One row to every peer, one from each; `edit` breaks this rank's call.
template <typename Edit>
void one_row_each(Communicator& c, RowLanding landing, Edit&& edit) {
  const auto n = std::size_t(c.size());
  RowBlocks to{std::vector<std::int64_t>(n, 1), std::vector<std::int64_t>(n, 0)}, from = to;
  for (std::size_t i = 0; i < n; ++i) from.rows[i] = std::int64_t(i);
  std::vector<double> send(2), recv(2 * n);
  std::int64_t width = 2;
  edit(to, from, width);
  c.alltoallv_indexed<double>(send, to, recv, from, width, landing);
}

template <CommElement T>
void add_typed(std::vector<Case>& cases) {
  const std::string t = type_name<T>();
  cases.push_back({"alltoallv_indexed.copy." + t, [](Communicator& c) { return indexed_case<T>(c, RowLanding::copy); }});
  cases.push_back({"alltoallv_indexed.add." + t, [](Communicator& c) { return indexed_case<T>(c, RowLanding::add); }});
  cases.push_back({"alltoallv_indexed.copy.grouped." + t, [](Communicator& c) {
                     return indexed_case<T>(c, RowLanding::copy, kWidth, {.sends = true, .landings = true});
                   }});
  cases.push_back({"alltoallv_indexed.add.grouped_sends." + t, [](Communicator& c) {
                     return indexed_case<T>(c, RowLanding::add, kWidth, {.sends = true});
                   }});
  if constexpr (std::same_as<T, double>) {
    cases.push_back({"alltoallv_indexed.add.wide_rows." + t,
                     [](Communicator& c) { return indexed_case<T>(c, RowLanding::add, 16384); }});
    cases.push_back({"alltoallv_indexed.add.grouped_sends.wide_rows." + t, [](Communicator& c) {
                       return indexed_case<T>(c, RowLanding::add, 16384, {.sends = true});
                     }});
    cases.push_back({"alltoallv_indexed.copy.grouped_landings." + t, [](Communicator& c) {
                       return indexed_case<T>(c, RowLanding::copy, kWidth, {.landings = true});
                     }});
    cases.push_back({"alltoallv_indexed.copy.remote_runs." + t, [](Communicator& c) {
                       return indexed_case<T>(c, RowLanding::copy, kWidth, {.runs = Runs::remote});
                     }});
    cases.push_back({"alltoallv_indexed.copy.local_runs." + t, [](Communicator& c) {
                       return indexed_case<T>(c, RowLanding::copy, kWidth, {.runs = Runs::local});
                     }});
    cases.push_back({"alltoallv_indexed.copy.repeats." + t, [](Communicator& c) {
                       return indexed_case<T>(c, RowLanding::copy, kWidth, {.landings = true, .runs = Runs::repeats});
                     }});
  }
}

}  // namespace

void add_row_exchange_cases(std::vector<Case>& cases, int size) {
  add_typed<double>(cases);
  add_typed<float>(cases);
  add_typed<std::int64_t>(cases);
  add_typed<std::int32_t>(cases);
  using R = RowBlocks;
  const auto rule = [&cases](std::string name, std::string text, RowLanding landing,
                             std::function<void(R&, R&, std::int64_t&)> edit) {
    cases.push_back({"error.args.alltoallv_indexed." + name, [=](Communicator& c) {
                       return expect_throw(c, text, [&] { one_row_each(c, landing, edit); });
                     }});
  };
  rule("send_row_outside", "outside the buffer", RowLanding::copy, [](R& to, R&, std::int64_t&) { to.rows[0] = 2; });
  rule("recv_row_outside", "outside the buffer", RowLanding::add, [](R&, R& from, std::int64_t&) { from.rows[0] = -1; });
  rule("counts_per_peer", "entries for", RowLanding::copy, [](R& to, R&, std::int64_t&) { to.counts.push_back(0); });
  rule("rows_and_counts", "add up to", RowLanding::copy, [](R& to, R&, std::int64_t&) { to.rows.push_back(0); });
  rule("width", "not rows of", RowLanding::copy, [](R&, R&, std::int64_t& width) { width = 3; });
  rule("zero_width", "at least one element", RowLanding::copy, [](R&, R&, std::int64_t& width) { width = 0; });
  rule("recv_groups_with_add", "only with RowLanding::copy", RowLanding::add, [](R&, R& from, std::int64_t&) {
    for (std::int64_t i = 0; i <= std::int64_t(from.rows.size()); ++i) from.starts.push_back(i);
  });
  rule("starts_length", "offsets for", RowLanding::copy, [](R& to, R&, std::int64_t&) { to.starts = {0}; });
  rule("empty_group", "is empty or reversed", RowLanding::copy, [](R& to, R&, std::int64_t&) {
    to.rows.pop_back();  // n - 1 rows in n groups: the first one empty
    to.starts = {0};
    for (std::int64_t i = 0; i <= std::int64_t(to.rows.size()); ++i) to.starts.push_back(i);
  });
  if (size >= 2)
    rule("copied_twice", "listed twice", RowLanding::copy, [](R&, R& from, std::int64_t&) { from.rows[1] = 0; });
  // Counts that do not match the peer's: checked on the calls of all ranks, so every rank throws.
  if (size >= 2) {
    cases.push_back({"error.calls.alltoallv_indexed_counts", [](Communicator& c) {
                       return expect_throw(c, "must match the peer's recv_counts", [&] {
                         one_row_each(c, RowLanding::add, [&](R& to, R&, std::int64_t&) {
                           if (c.rank() == 0) {  // rank 0 sends a second row to rank 1, which expects one
                             to.counts[1] = 2;
                             to.rows.insert(to.rows.begin() + 1, 0);
                           }
                         });
                       });
                     }});
  }
}

}  // namespace moe::conformance
