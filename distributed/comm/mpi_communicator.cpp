#include "distributed/comm/mpi_communicator.hpp"

#include "distributed/comm/cma_rows.hpp"
#include "distributed/comm/rank_order_reduction.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <memory>
#include <numeric>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, message, &length);
  throw std::runtime_error(std::string(what) + " failed: " + std::string(message, std::size_t(length)));
}

MPI_Datatype datatype(ElementType type) {
  switch (type) {
    case ElementType::f64: return MPI_DOUBLE;
    case ElementType::f32: return MPI_FLOAT;
    case ElementType::i64: return MPI_INT64_T;
    case ElementType::i32: break;
  }
  return MPI_INT32_T;
}

// MPI counts are int; ours are int64 so that callers never narrow.
int to_int(std::int64_t n) {
  if (n < 0 || n > INT_MAX) {
    throw std::invalid_argument("MPI backend: count " + std::to_string(n) +
                                " is outside [0, INT_MAX] (MPI counts are int)");
  }
  return int(n);
}

std::vector<int> to_ints(std::span<const std::int64_t> v) {
  std::vector<int> out;
  out.reserve(v.size());
  for (std::int64_t n : v) out.push_back(to_int(n));
  return out;
}

struct PendingSend {
  std::vector<std::byte> bytes;  // the buffered copy, alive until the request completes
  MPI_Request request = MPI_REQUEST_NULL;
};

}  // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  std::string name;  // for messages: "world", "world/split(3)"
  int rank = 0;
  int size = 0;
  std::vector<PendingSend> pending;
  int single_copy = -1;         // alltoallv_indexed reads peers' rows in place: -1 not yet known, 0 no, 1 yes
  std::vector<std::int64_t> pids;  // every rank's process, when single_copy is 1

  State(MPI_Comm c, std::string n) : comm(c), name(std::move(n)) {
    check(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check(MPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
    check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  }
  void reap_completed_sends() {
    std::erase_if(pending, [](PendingSend& p) {
      int done = 0;
      check(MPI_Test(&p.request, &done, MPI_STATUS_IGNORE), "MPI_Test");
      return done != 0;
    });
  }
};

namespace {

// The rows a single-copy reader takes per staging piece or per read: small enough to stay in cache while they are
// landed or added.
constexpr std::size_t kPieceBytes = std::size_t(256) << 10;

MPI_Comm duplicate_world() {
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  return comm;
}

}  // namespace

MpiCommunicator::MpiCommunicator(const MpiRuntime&) : state_(std::make_unique<State>(duplicate_world(), "world")) {}

MpiCommunicator::MpiCommunicator(std::unique_ptr<State> state) : state_(std::move(state)) {}

MpiCommunicator::~MpiCommunicator() {
  for (PendingSend& p : state_->pending) MPI_Wait(&p.request, MPI_STATUS_IGNORE);
  MPI_Comm_free(&state_->comm);
}

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }

// Every rank learns every rank's call, so check_calls reaches the same verdict everywhere, and every rank's `extra`
// (words a caller sends along, the same number on every rank), returned rank after rank. One MPI_Allgather of a
// slot per rank carries both: every collective waits for all its ranks, and with more ranks than cores each wait
// can cost a scheduling round, so one round instead of two (an allgather of lengths, then of the calls). A call
// longer than its slot (none of ours: the longest, an alltoallv, is 14 + 4·ranks words) takes a second round.
std::vector<std::int64_t> MpiCommunicator::check_with_peers(const CollectiveCall& call,
                                                            std::span<const std::int64_t> extra) const {
  const std::size_t peers = std::size_t(state_->size);
  std::vector<std::int64_t> mine = encode(call);
  const std::int64_t encoded = std::int64_t(mine.size());
  mine.insert(mine.end(), extra.begin(), extra.end());
  const std::size_t slot = 2 + 16 + 5 * peers;  // [words, of which the call, words…]
  std::vector<std::int64_t> out(slot, 0), all(slot * peers);
  out[0] = std::int64_t(mine.size());
  out[1] = encoded;
  std::copy_n(mine.begin(), std::min(mine.size(), slot - 2), out.begin() + 2);
  check(MPI_Allgather(out.data(), to_int(std::int64_t(slot)), MPI_INT64_T, all.data(), to_int(std::int64_t(slot)),
                      MPI_INT64_T, state_->comm),
        "MPI_Allgather");
  // Rank r's words: its call (of_call[r] words) then its extras, from `words` at starts[r].
  std::vector<std::int64_t> lengths(peers), of_call(peers), starts(peers);
  for (std::size_t r = 0; r < peers; ++r) {
    lengths[r] = all[r * slot];
    of_call[r] = all[r * slot + 1];
    starts[r] = std::int64_t(r * slot + 2);
  }
  const std::vector<std::int64_t>* words = &all;
  std::vector<std::int64_t> whole;
  if (std::any_of(lengths.begin(), lengths.end(), [&](std::int64_t n) { return n > std::int64_t(slot - 2); })) {
    whole.resize(std::size_t(std::accumulate(lengths.begin(), lengths.end(), std::int64_t{0})));
    starts = packed_displacements(lengths);
    check(MPI_Allgatherv(mine.data(), to_int(std::int64_t(mine.size())), MPI_INT64_T, whole.data(),
                         to_ints(lengths).data(), to_ints(starts).data(), MPI_INT64_T, state_->comm),
          "MPI_Allgatherv");
    words = &whole;
  }
  std::vector<std::int64_t> extras;
  try {
    std::vector<CollectiveCall> calls;
    for (std::size_t r = 0; r < peers; ++r) {
      if (of_call[r] < 0 || of_call[r] > lengths[r]) throw std::invalid_argument("decode: malformed collective call");
      calls.push_back(decode(std::span(*words).subspan(std::size_t(starts[r]), std::size_t(of_call[r]))));
    }
    check_calls(calls);
    if (call.kind == CollectiveKind::alltoallv) {  // an indexed exchange sends extras, a plain one none
      std::vector<bool> indexed;
      for (std::size_t r = 0; r < peers; ++r) indexed.push_back(lengths[r] > of_call[r]);
      check_same_alltoallv_form(indexed);
    }
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " [on " + state_->name + "]");
  }
  for (std::size_t r = 0; r < peers; ++r)
    extras.insert(extras.end(), words->begin() + starts[r] + of_call[r], words->begin() + starts[r] + lengths[r]);
  return extras;
}

// Rank j sends block i of its send buffer to rank i; rank i reduces the size() copies of its block in rank order.
void MpiCommunicator::reduce_scatterv(const CollectiveCall& call, const void* send, void* recv,
                                      std::span<const std::int64_t> block_sizes) const {
  const std::size_t element = element_size(call.type);
  const std::int64_t mine = block_sizes[std::size_t(state_->rank)];
  const std::vector<int> recv_counts(std::size_t(state_->size), to_int(mine));
  std::vector<int> recv_displs(std::size_t(state_->size));
  for (int j = 0; j < state_->size; ++j) recv_displs[std::size_t(j)] = to_int(j * mine);
  std::vector<std::byte> staging(std::size_t(state_->size * mine) * element);
  const MPI_Datatype type = datatype(call.type);
  check(MPI_Alltoallv(send, to_ints(block_sizes).data(), to_ints(packed_displacements(block_sizes)).data(), type,
                      staging.data(), recv_counts.data(), recv_displs.data(), type, state_->comm),
        "MPI_Alltoallv");
  std::vector<const void*> inputs;
  for (int j = 0; j < state_->size; ++j) inputs.push_back(staging.data() + std::size_t(j * mine) * element);
  reduce_in_rank_order(call.type, call.op, inputs, mine, recv);
}

// A reduce-scatter over near-equal chunks, then an allgatherv of the reduced chunks: the bandwidth of a ring
// allreduce, with every element still reduced in rank order. Works in place (send == recv): the send buffer is
// read completely before the allgatherv writes.
void MpiCommunicator::allreduce(const CollectiveCall& call, const void* send, void* recv) const {
  const std::int64_t n = call.send_size, ranks = state_->size;
  std::vector<std::int64_t> chunks(static_cast<std::size_t>(ranks));
  for (std::int64_t j = 0; j < ranks; ++j) chunks[std::size_t(j)] = n / ranks + (j < n % ranks ? 1 : 0);
  const std::int64_t mine = chunks[std::size_t(state_->rank)];
  std::vector<std::byte> reduced(std::size_t(mine) * element_size(call.type));
  reduce_scatterv(call, send, reduced.data(), chunks);
  const MPI_Datatype type = datatype(call.type);
  check(MPI_Allgatherv(reduced.data(), to_int(mine), type, recv, to_ints(chunks).data(),
                       to_ints(packed_displacements(chunks)).data(), type, state_->comm),
        "MPI_Allgatherv");
}

void MpiCommunicator::run_collective(const CollectiveCall& call, const void* send, void* recv) {
  check_with_peers(call);
  const MPI_Datatype type = datatype(call.type);
  const MPI_Comm comm = state_->comm;
  switch (call.kind) {
    case CollectiveKind::barrier: check(MPI_Barrier(comm), "MPI_Barrier"); return;
    case CollectiveKind::broadcast:
      check(MPI_Bcast(recv, to_int(call.recv_size), type, int(call.root), comm), "MPI_Bcast");
      return;
    case CollectiveKind::allgather:
      check(MPI_Allgather(send, to_int(call.send_size), type, recv, to_int(call.send_size), type, comm),
            "MPI_Allgather");
      return;
    case CollectiveKind::allgatherv:
      check(MPI_Allgatherv(send, to_int(call.send_size), type, recv, to_ints(call.recv_counts).data(),
                           to_ints(call.recv_displs).data(), type, comm),
            "MPI_Allgatherv");
      return;
    case CollectiveKind::alltoallv:
      check(MPI_Alltoallv(send, to_ints(call.send_counts).data(), to_ints(call.send_displs).data(), type, recv,
                          to_ints(call.recv_counts).data(), to_ints(call.recv_displs).data(), type, comm),
            "MPI_Alltoallv");
      return;
    case CollectiveKind::reduce_scatter:
      reduce_scatterv(call, send, recv, std::vector<std::int64_t>(std::size_t(state_->size), call.recv_size));
      return;
    case CollectiveKind::reduce_scatterv: reduce_scatterv(call, send, recv, call.recv_counts); return;
    case CollectiveKind::allreduce: allreduce(call, send, recv); return;
    case CollectiveKind::split: break;
  }
  throw std::logic_error("run_collective: split is not a data collective");
}

// Single copy when every rank can read the others (see the header), else the packing default.
void MpiCommunicator::run_indexed_alltoallv(const IndexedExchange& x) {
  // Along with the call, for the single-copy path: the send buffer's address and the buffer rows sent each peer.
  // A peer's rows are consecutive groups, so their buffer rows are one span of the starts.
  std::vector<std::int64_t> sends{std::int64_t(reinterpret_cast<std::uintptr_t>(x.send))};
  for (std::size_t d = 0, i = 0; d < x.to->counts.size(); i += std::size_t(x.to->counts[d]), ++d)
    sends.push_back(x.to->grouped() ? x.to->starts[i + std::size_t(x.to->counts[d])] - x.to->starts[i]
                                    : x.to->counts[d]);
  const std::vector<std::int64_t> peers_sends = check_with_peers(x.as_alltoallv(), sends);
  if (single_copy_ready()) {
    read_rows_from_peers(x, peers_sends);
  } else {
    Communicator::run_indexed_alltoallv(x);
  }
}

// Every rank probes every peer: it reads a value the peer holds at an address the peer published. All must succeed
// (and all must share one machine) for any to use the single-copy path, since the two paths do not interoperate.
bool MpiCommunicator::single_copy_ready() {
  State& s = *state_;
  if (s.single_copy >= 0) return s.single_copy == 1;
  int ok = 1;
  if (const char* e = std::getenv("MOE_MPI_SINGLE_COPY"); e != nullptr && std::string(e) == "0") ok = 0;
  MPI_Comm node = MPI_COMM_NULL;
  check(MPI_Comm_split_type(s.comm, MPI_COMM_TYPE_SHARED, s.rank, MPI_INFO_NULL, &node), "MPI_Comm_split_type");
  int node_size = 0;
  check(MPI_Comm_size(node, &node_size), "MPI_Comm_size");
  check(MPI_Comm_free(&node), "MPI_Comm_free");
  if (node_size != s.size) ok = 0;
  // Peers read `mark` while this rank waits in the allreduce below, so it outlives every probe.
  const std::int64_t mark = 0x6d6f65000000 + s.rank;
  const std::int64_t me[2] = {std::int64_t(getpid()), std::int64_t(reinterpret_cast<std::uintptr_t>(&mark))};
  std::vector<std::int64_t> all(2 * std::size_t(s.size));
  check(MPI_Allgather(me, 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, s.comm), "MPI_Allgather");
  for (int j = 0; j < s.size && ok == 1; ++j) {
    std::int64_t seen = 0;
    if (j != s.rank && (!cma_readable(pid_t(all[2 * std::size_t(j)]), std::uintptr_t(all[2 * std::size_t(j) + 1]),
                                      &seen, sizeof seen) ||
                        seen != 0x6d6f65000000 + j)) {
      ok = 0;
    }
  }
  int all_ok = 0;
  check(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, s.comm), "MPI_Allreduce");
  s.single_copy = all_ok;
  if (all_ok == 1) {
    for (int j = 0; j < s.size; ++j) s.pids.push_back(all[2 * std::size_t(j)]);
  }
  return all_ok == 1;
}

// Each rank knows from the check where each peer's send buffer lies and how many of its buffer rows it reads
// there; one alltoallv tells it how many of those make each row it receives (one, or a group the peer's call sums)
// and which rows they are. It reads them in (source, position) order and waits until every peer has read its rows
// before returning, so that the caller may then overwrite its send buffer.
void MpiCommunicator::read_rows_from_peers(const IndexedExchange& x, std::span<const std::int64_t> peers_sends) {
  State& s = *state_;
  const std::size_t peers = std::size_t(s.size);
  const auto sent_by = [&](std::size_t j) { return peers_sends.subspan(j * (peers + 1), peers + 1); };
  // To each peer: the group size of each row it receives from this rank, then the buffer rows of those groups.
  std::vector<std::int64_t> out, out_counts(peers), in_counts(peers);
  for (std::size_t d = 0, i = 0; d < peers; ++d) {
    const std::size_t first = i;
    for (std::int64_t k = 0; k < x.to->counts[d]; ++k, ++i) out.push_back(std::int64_t(x.to->group(i).size()));
    const std::size_t rows = std::size_t(sent_by(std::size_t(s.rank))[1 + d]);
    const std::size_t from = x.to->grouped() ? std::size_t(x.to->starts[first]) : first;
    out.insert(out.end(), x.to->rows.begin() + std::ptrdiff_t(from), x.to->rows.begin() + std::ptrdiff_t(from + rows));
    out_counts[d] = x.to->counts[d] + std::int64_t(rows);
    in_counts[d] = x.from->counts[d] + sent_by(d)[1 + std::size_t(s.rank)];
  }
  std::vector<std::int64_t> in(std::size_t(std::accumulate(in_counts.begin(), in_counts.end(), std::int64_t{0})));
  check(MPI_Alltoallv(out.data(), to_ints(out_counts).data(), to_ints(packed_displacements(out_counts)).data(),
                      MPI_INT64_T, in.data(), to_ints(in_counts).data(), to_ints(packed_displacements(in_counts)).data(),
                      MPI_INT64_T, s.comm),
        "MPI_Alltoallv");

  std::vector<PeerRows> from_peers;
  bool plain = true;  // every peer sends single rows, no sums of groups
  for (std::size_t j = 0, h = 0, e = 0; j < peers; ++j) {
    const std::size_t n = std::size_t(x.from->counts[j]), rows = std::size_t(in_counts[j]) - n;
    const std::span<const std::int64_t> block = std::span(in).subspan(h, n + rows);
    from_peers.push_back({int(j), std::uintptr_t(sent_by(j)[0]), block.first(n), block.subspan(n), e});
    plain = plain && rows == n;
    h += n + rows;
    e += n;
  }
  std::string failure;
  try {
    if (x.landing == RowLanding::add && plain) {
      add_by_receive_ranges(from_peers, x);
    } else {
      for (const PeerRows& peer : from_peers) read_from(peer, x);
    }
  } catch (const std::runtime_error& e) {
    failure = e.what();
  }
  // Also the point after which no peer reads this rank's send buffer; every rank fails together.
  int failed = failure.empty() ? 0 : 1, any_failed = 0;
  check(MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, s.comm), "MPI_Allreduce");
  if (any_failed != 0) {
    throw std::runtime_error("alltoallv_indexed on " + s.name + ": " +
                             (failure.empty() ? std::string("a peer could not read its rows") : failure));
  }
}

// The rows one peer sends: plain rows to be copied go straight from its buffer to where they land (then on to the
// rest of a receive group); sums and groups are read a cache-sized piece at a time into staging and landed or
// added from there at once, so each crosses memory once, and pieces in (source, position) order give land_rows'
// order of the sum. A rank's own rows are landed from its send buffer.
void MpiCommunicator::read_from(const PeerRows& peer, const IndexedExchange& x) {
  const std::size_t row_bytes = std::size_t(x.width) * element_size(x.type);
  const std::size_t n = peer.sizes.size();
  const bool groups = std::any_of(peer.sizes.begin(), peer.sizes.end(), [](std::int64_t k) { return k > 1; });
  std::vector<std::int64_t> starts{0};  // of this peer's rows, when it sends groups
  if (groups)
    for (const auto k : peer.sizes) starts.push_back(starts.back() + k);
  const auto* own = peer.rank == state_->rank ? reinterpret_cast<const std::byte*>(peer.base) : nullptr;
  const pid_t pid = pid_t(state_->pids[std::size_t(peer.rank)]);
  // Arrivals for this peer's rows [b, e), their sources given.
  std::vector<std::int64_t> piece_starts;
  const auto arrivals = [&](std::size_t b, std::size_t e, std::span<const std::byte* const> sources) {
    piece_starts.clear();
    if (groups)
      for (std::size_t i = b; i <= e; ++i) piece_starts.push_back(starts[i] - starts[b]);
    const std::size_t at = peer.first + b;
    if (!x.from->grouped()) return Arrivals{sources, piece_starts, std::span(x.from->rows).subspan(at, e - b), {}};
    return Arrivals{sources, piece_starts, x.from->rows, std::span(x.from->starts).subspan(at, e - b + 1)};
  };
  const auto land = [&](const Arrivals& in) {
    if (x.landing == RowLanding::copy) land_rows(x.type, x.width, in, x.recv, x.recv_rows, RowLanding::copy);
    else add_rows(x.type, x.width, in, x.recv);
  };
  std::vector<const std::byte*> sources;
  if (own != nullptr) {
    for (const auto r : peer.rows) sources.push_back(own + std::size_t(r) * row_bytes);
    land(arrivals(0, n, sources));
    return;
  }
  auto* recv = static_cast<std::byte*>(x.recv);
  // Positions of `rows` in their rising order (stable).
  std::vector<std::size_t> order;
  const auto rising = [&](std::span<const std::int64_t> rows) {
    order.resize(rows.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    if (!std::is_sorted(rows.begin(), rows.end()))
      std::stable_sort(order.begin(), order.end(), [&](std::size_t i, std::size_t k) { return rows[i] < rows[k]; });
  };
  if (x.landing == RowLanding::copy && !groups) {
    // Each distinct row of the peer is read once, in rising order (so runs of them are one piece), into the first
    // place it lands; its other places (one token for several experts of this rank, a receive group) are copied
    // from there while it is in cache, a cache-sized piece of distinct rows at a time.
    std::vector<std::int64_t> distinct, landed;
    rising(peer.rows);
    for (std::size_t b = 0; b < n;) {
      distinct.clear();
      landed.clear();
      std::size_t e = b;
      for (; e < n; ++e) {
        const std::int64_t row = peer.rows[order[e]];
        if (!distinct.empty() && row == distinct.back()) continue;
        if (distinct.size() * row_bytes >= kPieceBytes) break;
        distinct.push_back(row);
        landed.push_back(x.from->group(peer.first + order[e])[0]);
      }
      cma_read_rows(pid, peer.base, distinct, recv, landed, row_bytes);
      for (std::size_t k = b, u = 0; k < e; ++k) {
        if (k > b && peer.rows[order[k]] != peer.rows[order[k - 1]]) ++u;
        const std::byte* read = recv + std::size_t(landed[u]) * row_bytes;
        for (const auto r : x.from->group(peer.first + order[k]))
          if (r != landed[u]) std::memcpy(recv + std::size_t(r) * row_bytes, read, row_bytes);
      }
      b = e;
    }
    return;
  }
  std::vector<std::int64_t> sorted;
  for (std::size_t b = 0; b < n;) {
    std::size_t e = b + 1;
    const auto row_of = [&](std::size_t i) { return groups ? std::size_t(starts[i]) : i; };
    while (e < n && (row_of(e + 1) - row_of(b)) * row_bytes <= kPieceBytes) ++e;
    // Read in rising order of the peer's rows, which makes runs of them (a Flex group's rows are scattered, but the
    // groups of consecutive received rows take consecutive rows of each expert), and point each source at its row.
    const std::span<const std::int64_t> rows = peer.rows.subspan(row_of(b), row_of(e) - row_of(b));
    rising(rows);
    sorted.resize(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) sorted[i] = rows[order[i]];
    std::byte* staged = staging(1, rows.size() * row_bytes);
    cma_read_rows(pid, peer.base, sorted, staged, {}, row_bytes);
    sources.resize(rows.size());
    for (std::size_t i = 0; i < rows.size(); ++i) sources[order[i]] = staged + i * row_bytes;
    land(arrivals(b, e, sources));
    b = e;
  }
}

// Peer by peer (read_from), every row added into a receive row fetches that row from memory: with top-k routing a
// token's k expert outputs arrive from several peers and far apart, and the receive buffer is larger than the
// cache. Here the receive rows are taken a cache-sized range at a time; for each range every peer's rows that land
// in it are read (in the peer's position order, so in runs of its rows) and added before the next range, so each
// receive row stays in cache while all its rows are added. A receive row still takes its rows in (source,
// position) order, the order of land_rows, so the sums have the same bits.
void MpiCommunicator::add_by_receive_ranges(std::span<const PeerRows> peers, const IndexedExchange& x) {
  const std::size_t row_bytes = std::size_t(x.width) * element_size(x.type);
  const auto range_rows = std::int64_t(std::max<std::size_t>(1, (std::size_t(128) << 10) / row_bytes));
  const auto piece_rows = std::max<std::size_t>(1, kPieceBytes / row_bytes);
  const std::size_t ranges = std::size_t((x.recv_rows + range_rows - 1) / range_rows);
  // Each peer's positions grouped by the range their receive row lies in, in position order within a range (a
  // stable counting sort).
  std::vector<std::vector<std::int64_t>> start(peers.size()), position(peers.size());
  for (std::size_t j = 0; j < peers.size(); ++j) {
    const auto lands = std::span(x.from->rows).subspan(peers[j].first, peers[j].rows.size());
    start[j].assign(ranges + 1, 0);
    for (const auto r : lands) ++start[j][std::size_t(r / range_rows) + 1];
    std::partial_sum(start[j].begin(), start[j].end(), start[j].begin());
    std::vector<std::int64_t> next(start[j].begin(), start[j].end() - 1);
    position[j].resize(lands.size());
    for (std::size_t k = 0; k < lands.size(); ++k)
      position[j][std::size_t(next[std::size_t(lands[k] / range_rows)]++)] = std::int64_t(k);
  }
  std::vector<std::int64_t> remote, landed;
  std::vector<const std::byte*> sources;
  for (std::size_t c = 0; c < ranges; ++c) {
    for (std::size_t j = 0; j < peers.size(); ++j) {
      const PeerRows& peer = peers[j];
      const auto* own = peer.rank == state_->rank ? reinterpret_cast<const std::byte*>(peer.base) : nullptr;
      for (auto b = std::size_t(start[j][c]); b < std::size_t(start[j][c + 1]); b += piece_rows) {
        const std::size_t e = std::min(b + piece_rows, std::size_t(start[j][c + 1]));
        remote.clear();
        landed.clear();
        for (std::size_t i = b; i < e; ++i) {
          const auto k = std::size_t(position[j][i]);
          remote.push_back(peer.rows[k]);
          landed.push_back(x.from->rows[peer.first + k]);
        }
        sources.resize(remote.size());
        if (own != nullptr) {
          for (std::size_t i = 0; i < remote.size(); ++i) sources[i] = own + std::size_t(remote[i]) * row_bytes;
        } else {
          std::byte* staged = staging(1, remote.size() * row_bytes);
          cma_read_rows(pid_t(state_->pids[std::size_t(peer.rank)]), peer.base, remote, staged, {}, row_bytes);
          for (std::size_t i = 0; i < remote.size(); ++i) sources[i] = staged + i * row_bytes;
        }
        add_rows(x.type, x.width, Arrivals{sources, {}, landed, {}}, x.recv);
      }
    }
  }
}

std::unique_ptr<Communicator> MpiCommunicator::run_split(const CollectiveCall& call) {
  check_with_peers(call);
  MPI_Comm comm = MPI_COMM_NULL;
  check(MPI_Comm_split(state_->comm, int(call.color), int(call.key), &comm), "MPI_Comm_split");
  auto state = std::make_unique<State>(comm, state_->name + "/split(" + std::to_string(call.color) + ")");
  return std::unique_ptr<Communicator>(new MpiCommunicator(std::move(state)));
}

void MpiCommunicator::send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) {
  state_->reap_completed_sends();
  PendingSend p{std::vector<std::byte>(std::size_t(count) * element_size(type)), MPI_REQUEST_NULL};
  if (count > 0) std::memcpy(p.bytes.data(), data, p.bytes.size());
  check(MPI_Isend(p.bytes.data(), to_int(std::int64_t(p.bytes.size())), MPI_BYTE, dest, tag, state_->comm, &p.request),
        "MPI_Isend");
  state_->pending.push_back(std::move(p));
}

void MpiCommunicator::recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) {
  MPI_Status status;
  check(MPI_Probe(source, tag, state_->comm, &status), "MPI_Probe");
  int bytes = 0;
  check(MPI_Get_count(&status, MPI_BYTE, &bytes), "MPI_Get_count");
  const std::int64_t expected = count * std::int64_t(element_size(type));
  if (bytes != expected) {
    std::vector<std::byte> discarded(static_cast<std::size_t>(bytes));  // consume it, as the in-process backend does
    check(MPI_Recv(discarded.data(), bytes, MPI_BYTE, source, tag, state_->comm, MPI_STATUS_IGNORE), "MPI_Recv");
    throw std::invalid_argument("recv: rank " + std::to_string(source) + " sent " + std::to_string(bytes) +
                                " bytes with tag " + std::to_string(tag) + " but rank " + std::to_string(state_->rank) +
                                " receives " + std::to_string(count) + " " + std::string(element_type_name(type)) +
                                " elements of " + std::to_string(expected) +
                                " bytes (a message must fill the receive buffer exactly)");
  }
  check(MPI_Recv(data, bytes, MPI_BYTE, source, tag, state_->comm, MPI_STATUS_IGNORE), "MPI_Recv");
}

}  // namespace moe
