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
  if (std::int64_t(b->rows.size()) != sum(b->counts))
    fail(s + " rows lists " + std::to_string(b->rows.size()) + " rows but its counts add up to " +
         std::to_string(sum(b->counts)));
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
}

void pack_rows(ElementType type, std::int64_t width, const void* from, std::span<const std::int64_t> rows, void* to) {
  const std::size_t row_bytes = std::size_t(width) * element_size(type);
  const auto* src = static_cast<const std::byte*>(from);
  auto* dst = static_cast<std::byte*>(to);
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dst + i * row_bytes, src + std::size_t(rows[i]) * row_bytes, row_bytes);
}

void land_rows(ElementType type, std::int64_t width, std::span<const std::byte* const> sources,
               std::span<const std::int64_t> rows, void* recv, std::int64_t recv_rows, RowLanding landing) {
  const std::size_t row_bytes = std::size_t(width) * element_size(type);
  auto* out = static_cast<std::byte*>(recv);
  if (landing == RowLanding::copy) {
    for (std::size_t i = 0; i < rows.size(); ++i) std::memcpy(out + std::size_t(rows[i]) * row_bytes, sources[i], row_bytes);
    return;
  }
  // A stable counting sort by receive row, so that each receive row is read and written once and takes its rows
  // in their given order.
  std::vector<std::int64_t> start(static_cast<std::size_t>(recv_rows) + 1, 0);
  for (const auto r : rows) ++start[std::size_t(r) + 1];
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<const std::byte*> by_row(rows.size());
  std::vector<std::int64_t> sorted_rows(rows.size());
  std::vector<std::int64_t> next(start.begin(), start.end() - 1);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto at = std::size_t(next[std::size_t(rows[i])]++);
    by_row[at] = sources[i];
    sorted_rows[at] = rows[i];
  }
  add_rows(type, width, by_row, sorted_rows, recv);
}

void add_rows(ElementType type, std::int64_t width, std::span<const std::byte* const> sources,
              std::span<const std::int64_t> rows, void* recv) {
  const std::size_t row_bytes = std::size_t(width) * element_size(type);
  auto* out = static_cast<std::byte*>(recv);
  visit_element_type(type, [&]<typename T>() {
    for (std::size_t i = 0; i < rows.size(); ++i) {
      T* acc = reinterpret_cast<T*>(out + std::size_t(rows[i]) * row_bytes);
      const T* src = reinterpret_cast<const T*>(sources[i]);
      for (std::int64_t c = 0; c < width; ++c) acc[c] += src[c];
    }
  });
}

}  // namespace moe
