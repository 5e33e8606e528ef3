// In-process ranks: runs one function on N threads, one per rank, each with its own Communicator&. Used by the
// property tests and the teaching stepper, where starting processes would cost more than the work.
//
// Same semantics as MpiCommunicator (communicator.hpp), plus what threads make possible:
//   - deterministic: reductions sum in rank order; collectives never depend on thread timing;
//   - no hangs: if a rank throws, the world is aborted (ranks waiting in a collective or a recv wake up with
//     WorldAborted) and run() rethrows the first exception; if every live rank waits for something no rank can
//     provide (mismatched sends, a rank that returned early), run() throws WorldAborted naming each rank's wait.
#pragma once

#include "distributed/comm/communicator.hpp"

#include <functional>
#include <stdexcept>

namespace moe {

// The world stopped: thrown inside ranks when another rank failed, and by run() on a deadlock.
class WorldAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InprocWorld {
 public:
  // One thread per rank: past this many, the machine thrashes long before the check says anything.
  static constexpr int kMaxRanks = 1024;
  explicit InprocWorld(int size);  // throws std::invalid_argument unless 1 <= size <= kMaxRanks

  int size() const { return size_; }

  // Runs fn(comm) on every rank, each run on a fresh world, and returns when all ranks have returned.
  void run(const std::function<void(Communicator&)>& fn) const;

 private:
  int size_;
};

}  // namespace moe
