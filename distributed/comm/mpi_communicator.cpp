#include "distributed/comm/mpi_communicator.hpp"

#include "distributed/comm/rank_order_reduction.hpp"

#include <mpi.h>

#include <climits>
#include <memory>
#include <cstddef>
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

// One MPI datatype per peer that picks rows of a buffer (a block of row_bytes at each row's byte offset), freed
// when it goes: MPI then reads rows where they lie, and writes them where they land, with no pack of ours.
class RowTypes {
 public:
  RowTypes(std::size_t peers, std::int64_t row_bytes) : row_bytes_(row_bytes), types_(peers, MPI_BYTE), counts_(peers, 0) {}
  RowTypes(const RowTypes&) = delete;
  RowTypes& operator=(const RowTypes&) = delete;
  ~RowTypes() {
    for (MPI_Datatype& t : types_)
      if (t != MPI_BYTE) MPI_Type_free(&t);
  }
  // Peer j's rows: `count` entries of `rows`.
  void set(std::size_t j, const std::int64_t* rows, std::int64_t count) {
    if (count == 0) return;
    std::vector<MPI_Aint> at(static_cast<std::size_t>(count));
    for (std::size_t k = 0; k < at.size(); ++k) at[k] = MPI_Aint(rows[k] * row_bytes_);
    check(MPI_Type_create_hindexed_block(to_int(count), to_int(row_bytes_), at.data(), MPI_BYTE, &types_[j]),
          "MPI_Type_create_hindexed_block");
    check(MPI_Type_commit(&types_[j]), "MPI_Type_commit");
    counts_[j] = 1;
  }
  // Every peer's rows, block after block as `blocks` describes them.
  void set_all(const RowBlocks& blocks) {
    std::int64_t first = 0;
    for (std::size_t j = 0; j < types_.size(); ++j) {
      set(j, blocks.rows.data() + first, blocks.counts[j]);
      first += blocks.counts[j];
    }
  }
  const int* counts() const { return counts_.data(); }
  const MPI_Datatype* types() const { return types_.data(); }

 private:
  std::int64_t row_bytes_;
  std::vector<MPI_Datatype> types_;
  std::vector<int> counts_;
};

}  // namespace

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_NULL;
  std::string name;  // for messages: "world", "world/split(3)"
  int rank = 0;
  int size = 0;
  std::vector<PendingSend> pending;

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

// Every rank learns every rank's call, so check_calls reaches the same verdict everywhere.
void MpiCommunicator::check_with_peers(const CollectiveCall& call) const {
  const std::vector<std::int64_t> mine = encode(call);
  const std::int64_t length = std::int64_t(mine.size());
  std::vector<std::int64_t> lengths(std::size_t(state_->size));
  check(MPI_Allgather(&length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, state_->comm), "MPI_Allgather");
  const std::vector<std::int64_t> displs = packed_displacements(lengths);
  std::vector<std::int64_t> all(std::size_t(displs.back() + lengths.back()));
  check(MPI_Allgatherv(mine.data(), to_int(length), MPI_INT64_T, all.data(), to_ints(lengths).data(),
                       to_ints(displs).data(), MPI_INT64_T, state_->comm),
        "MPI_Allgatherv");
  std::vector<CollectiveCall> calls;
  for (std::size_t r = 0; r < lengths.size(); ++r) {
    calls.push_back(decode(std::span(all).subspan(std::size_t(displs[r]), std::size_t(lengths[r]))));
  }
  try {
    check_calls(calls);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(e.what()) + " [on " + state_->name + "]");
  }
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

// MPI_Alltoallw with a row-picking datatype per peer on both sides. Added rows arrive packed in (source,
// position) order and land_rows sums them, as every backend does.
void MpiCommunicator::run_indexed_alltoallv(const IndexedExchange& x) {
  check_with_peers(x.as_alltoallv());
  const std::size_t peers = std::size_t(state_->size);
  const std::int64_t row_bytes = x.width * std::int64_t(element_size(x.type));
  RowTypes send(peers, row_bytes), recv(peers, row_bytes);
  send.set_all(*x.to);
  const bool add = x.landing == RowLanding::add;
  const std::size_t arriving = x.from->rows.size();
  std::unique_ptr<std::byte[]> arrived;
  if (add) {
    arrived = std::make_unique_for_overwrite<std::byte[]>(arriving * std::size_t(row_bytes));
    std::vector<std::int64_t> in_order(arriving);
    for (std::size_t i = 0; i < arriving; ++i) in_order[i] = std::int64_t(i);
    recv.set_all(RowBlocks{x.from->counts, std::move(in_order)});
  } else {
    recv.set_all(*x.from);
  }
  const std::vector<int> at_start(peers, 0);
  check(MPI_Alltoallw(x.send, send.counts(), at_start.data(), send.types(), add ? arrived.get() : x.recv,
                      recv.counts(), at_start.data(), recv.types(), state_->comm),
        "MPI_Alltoallw");
  if (!add) return;
  std::vector<const std::byte*> sources(arriving);
  for (std::size_t i = 0; i < arriving; ++i) sources[i] = arrived.get() + i * std::size_t(row_bytes);
  land_rows(x.type, x.width, sources, x.from->rows, x.recv, x.recv_rows, x.landing);
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
