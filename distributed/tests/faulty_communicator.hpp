// A Communicator that wraps a correct one and commits one seeded fault, so the tests can show that the
// conformance cases catch it (docs/testing.md: a test that cannot fail is a defect).
#pragma once

#include "distributed/comm/communicator.hpp"

#include <memory>
#include <cstddef>
#include <stdexcept>
#include <vector>

namespace moe::conformance {

struct Fault {
  enum class Kind {
    corrupt_output,    // after a `collective` call, rank 0's last received element is off by one
    corrupt_message,   // rank 0's last received element of every non-empty message is off by one
    ignore_split_key,  // split orders by parent rank only
    swallow_errors,    // the backend's std::invalid_argument never reaches the caller
    reversed_adds,     // alltoallv_indexed adds a receive row's incoming rows last source first
  };
  Kind kind;
  CollectiveKind collective = CollectiveKind::barrier;
};

class FaultyCommunicator final : public Communicator {
 public:
  FaultyCommunicator(Communicator& inner, Fault fault) : inner_(inner), fault_(fault) {}
  // Over a sub-communicator it owns, so that splits of a faulty communicator are faulty too.
  FaultyCommunicator(std::unique_ptr<Communicator> owned, Fault fault)
      : owned_(std::move(owned)), inner_(*owned_), fault_(fault) {}

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }

  void run_collective(const CollectiveCall& call, const void* send, void* recv) override {
    swallowing([&] { inner_.run_collective(call, send, recv); });
    if (fault_.kind == Fault::Kind::corrupt_output && call.kind == fault_.collective) {
      off_by_one(call.type, recv, call.recv_size);
    }
  }
  std::unique_ptr<Communicator> run_split(const CollectiveCall& call) override {
    CollectiveCall changed = call;
    if (fault_.kind == Fault::Kind::ignore_split_key) changed.key = 0;
    std::unique_ptr<Communicator> sub;
    swallowing([&] { sub = inner_.run_split(changed); });
    if (!sub) return nullptr;
    return std::make_unique<FaultyCommunicator>(std::move(sub), fault_);
  }
  // Without the reversed_adds fault, the Communicator's default (pack, this wrapper's alltoallv, land): the
  // conformance cases run it in process too.
  void run_indexed_alltoallv(const IndexedExchange& x) override {
    if (fault_.kind != Fault::Kind::reversed_adds || x.landing != RowLanding::add) {
      Communicator::run_indexed_alltoallv(x);
      return;
    }
    const std::size_t row_bytes = std::size_t(x.width) * element_size(x.type);
    const CollectiveCall call = x.as_alltoallv();
    std::vector<std::byte> packed(std::size_t(call.send_size) * element_size(x.type));
    std::vector<std::byte> arrived(std::size_t(call.recv_size) * element_size(x.type));
    pack_rows(x.type, x.width, x.send, *x.to, packed.data());
    run_collective(call, packed.data(), arrived.data());
    std::vector<const std::byte*> sources;
    std::vector<std::int64_t> rows;
    for (std::size_t i = x.from->rows.size(); i-- > 0;) {
      sources.push_back(arrived.data() + i * row_bytes);
      rows.push_back(x.from->rows[i]);
    }
    land_rows(x.type, x.width, {sources, {}, rows, {}}, x.recv, x.recv_rows, x.landing);
  }
  void send_bytes(ElementType type, const void* data, std::int64_t count, int dest, int tag) override {
    inner_.send_bytes(type, data, count, dest, tag);
  }
  void recv_bytes(ElementType type, void* data, std::int64_t count, int source, int tag) override {
    swallowing([&] { inner_.recv_bytes(type, data, count, source, tag); });
    if (fault_.kind == Fault::Kind::corrupt_message) off_by_one(type, data, count);
  }

 private:
  template <typename F>
  void swallowing(F&& f) {
    try {
      f();
    } catch (const std::invalid_argument&) {
      if (fault_.kind != Fault::Kind::swallow_errors) throw;
    }
  }
  void off_by_one(ElementType type, void* data, std::int64_t count) const {
    if (inner_.rank() != 0 || count == 0) return;
    visit_element_type(type, [&]<typename T>() { static_cast<T*>(data)[count - 1] += T(1); });
  }

  std::unique_ptr<Communicator> owned_;
  Communicator& inner_;
  Fault fault_;
};

}  // namespace moe::conformance
