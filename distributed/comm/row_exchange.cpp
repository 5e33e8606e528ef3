#include "distributed/comm/row_exchange.hpp"

#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>

namespace moe {
namespace {

std::int64_t sum(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

std::vector<std::int64_t> scaled(const std::vector<std::int64_t>& rows, std::int64_t width) {
  std::vector<std::int64_t> out(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) out[i] = rows[i] * width;
  return out;
}

std::vector<std::int64_t> packed(const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> displs(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) displs[i] = displs[i - 1] + counts[i - 1];
  return displs;
}

void fail(const std::string& what) { throw std::invalid_argument("alltoallv_indexed: " + what); }

void check_side(const char* side, const RowBlocks* b, int peers, std::int64_t buffer_rows, bool distinct) {
  const std::string s = side;
  if (b == nullptr) fail(s + " rows missing");
  if (std::int64_t(b->counts.size()) != peers)
    fail(s + " counts has " + std::to_string(b->counts.size()) + " entries for " + std::to_string(peers) + " ranks");
  for (const auto c : b->counts)
    if (c < 0) fail(s + " count " + std::to_string(c) + " is negative");
  const std::int64_t exchanged = sum(b->counts);
  if (b->grouped()) {
    if (std::int64_t(b->starts.size()) != exchanged + 1)
      fail(s + " starts has " + std::to_string(b->starts.size()) + " offsets for " + std::to_string(exchanged) +
           " rows (one more than the rows its counts add up to)");
    if (b->starts.front() != 0 || b->starts.back() != std::int64_t(b->rows.size()))
      fail(s + " starts must run from 0 to the " + std::to_string(b->rows.size()) + " rows listed");
    for (std::size_t i = 1; i < b->starts.size(); ++i)
      if (b->starts[i] <= b->starts[i - 1]) fail(s + " group " + std::to_string(i - 1) + " is empty or reversed");
  } else if (std::int64_t(b->rows.size()) != exchanged) {
    fail(s + " rows lists " + std::to_string(b->rows.size()) + " rows but its counts add up to " +
         std::to_string(exchanged));
  }
  std::vector<bool> seen(distinct ? static_cast<std::size_t>(buffer_rows) : 0);
  for (const auto r : b->rows) {
    if (r < 0 || r >= buffer_rows)
      fail(s + " row " + std::to_string(r) + " is outside the buffer's " + std::to_string(buffer_rows) + " rows");
    if (distinct) {
      if (seen[static_cast<std::size_t>(r)])
        fail(s + " row " + std::to_string(r) + " is listed twice (with RowLanding::copy a row is written once)");
      seen[static_cast<std::size_t>(r)] = true;
    }
  }
}

// out = the sum of the n rows at src, left to right from the first.
template <typename T>
void sum_rows(T* out, const std::byte* const* src, std::size_t n, std::int64_t width) {
  std::memcpy(out, src[0], std::size_t(width) * sizeof(T));
  for (std::size_t k = 1; k < n; ++k) {
    const T* row = reinterpret_cast<const T*>(src[k]);
    for (std::int64_t c = 0; c < width; ++c) out[c] += row[c];
  }
}

// The sources of arriving row i, and how many.
std::span<const std::byte* const> sources_of(const Arrivals& in, std::size_t i) {
  if (in.source_starts.empty()) return in.sources.subspan(i, 1);
  const auto b = std::size_t(in.source_starts[i]), e = std::size_t(in.source_starts[i + 1]);
  return in.sources.subspan(b, e - b);
}

// Receive row rows[i] += arriving row i, for i in `order` (all of them when empty).
void add_in_order(ElementType type, std::int64_t width, const Arrivals& in, std::span<const std::int64_t> order,
                  void* recv) {
  const std::size_t row_bytes = std::size_t(width) * element_size(type);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t n = order.empty() ? in.rows.size() : order.size();
  visit_element_type(type, [&]<typename T>() {
    std::vector<T> group_sum(in.source_starts.empty() ? 0 : std::size_t(width));
    for (std::size_t k = 0; k < n; ++k) {
      const std::size_t i = order.empty() ? k : std::size_t(order[k]);
      T* acc = reinterpret_cast<T*>(out + std::size_t(in.rows[i]) * row_bytes);
      const auto src = sources_of(in, i);
      const T* row = reinterpret_cast<const T*>(src[0]);
      if (src.size() > 1) {
        sum_rows(group_sum.data(), src.data(), src.size(), width);
        row = group_sum.data();
      }
      for (std::int64_t c = 0; c < width; ++c) acc[c] += row[c];
    }
  });
}

}  // namespace

CollectiveCall IndexedExchange::as_alltoallv() const {
  CollectiveCall c;
  c.kind = CollectiveKind::alltoallv;
  c.type = type;
  c.send_counts = scaled(to->counts, width);
  c.recv_counts = scaled(from->counts, width);
  c.send_displs = packed(c.send_counts);
  c.recv_displs = packed(c.recv_counts);
  c.send_size = sum(c.send_counts);
  c.recv_size = sum(c.recv_counts);
  return c;
}

void check_indexed_exchange(const IndexedExchange& x, int peers) {
  if (x.width < 1) fail("width " + std::to_string(x.width) + " (a row holds at least one element)");
  check_side("send", x.to, peers, x.send_rows, false);
  check_side("receive", x.from, peers, x.recv_rows, x.landing == RowLanding::copy);
  if (x.from->grouped() && x.landing != RowLanding::copy)
    fail("a received row lands in several rows (receive starts) only with RowLanding::copy");
}

void pack_rows(ElementType type, std::int64_t width, const void* from, const RowBlocks& to, void* packed) {
  const std::size_t row_bytes = std::size_t(width) * element_size(type);
  const auto* src = static_cast<const std::byte*>(from);
  auto* dst = static_cast<std::byte*>(packed);
  if (!to.grouped()) {
    for (std::size_t i = 0; i < to.rows.size(); ++i)
      std::memcpy(dst + i * row_bytes, src + std::size_t(to.rows[i]) * row_bytes, row_bytes);
    return;
  }
  visit_element_type(type, [&]<typename T>() {
    std::vector<const std::byte*> group;
    for (std::size_t i = 0; i + 1 < to.starts.size(); ++i) {
      group.clear();
      for (const auto r : to.group(i)) group.push_back(src + std::size_t(r) * row_bytes);
      sum_rows(reinterpret_cast<T*>(dst + i * row_bytes), group.data(), group.size(), width);
    }
  });
}

void land_rows(ElementType type, std::int64_t width, const Arrivals& in, void* recv, std::int64_t recv_rows,
               RowLanding landing) {
  const std::size_t row_bytes = std::size_t(width) * element_size(type);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t arriving = in.row_starts.empty() ? in.rows.size() : in.row_starts.size() - 1;
  if (landing == RowLanding::copy) {
    // Into the first row of its group (summed there when it comes as a group), then copied to the others.
    visit_element_type(type, [&]<typename T>() {
      for (std::size_t i = 0; i < arriving; ++i) {
        const std::size_t b = in.row_starts.empty() ? i : std::size_t(in.row_starts[i]);
        const std::size_t e = in.row_starts.empty() ? i + 1 : std::size_t(in.row_starts[i + 1]);
        std::byte* first = out + std::size_t(in.rows[b]) * row_bytes;
        const auto src = sources_of(in, i);
        sum_rows(reinterpret_cast<T*>(first), src.data(), src.size(), width);
        for (std::size_t k = b + 1; k < e; ++k) std::memcpy(out + std::size_t(in.rows[k]) * row_bytes, first, row_bytes);
      }
    });
    return;
  }
  // A stable counting sort by receive row, so that each receive row is read and written once and takes its rows
  // in their given order.
  std::vector<std::int64_t> start(static_cast<std::size_t>(recv_rows) + 1, 0);
  for (const auto r : in.rows) ++start[std::size_t(r) + 1];
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<std::int64_t> order(in.rows.size());
  std::vector<std::int64_t> next(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < in.rows.size(); ++i) order[std::size_t(next[std::size_t(in.rows[i])]++)] = std::int64_t(i);
  add_in_order(type, width, in, order, recv);
}

void add_rows(ElementType type, std::int64_t width, const Arrivals& in, void* recv) {
  add_in_order(type, width, in, {}, recv);
}

}  // namespace moe
