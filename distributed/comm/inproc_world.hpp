// In-process ranks: runs one function on N ranks, each with its own Communicator&. Used by `check`, the property
// tests and the teaching stepper, where starting processes would cost more than the work.
//
// A rank is a fiber (default) or a thread:
//   fibers   every rank of the world runs on the calling thread and gives it up only where it would block; no
//            kernel is involved in a hand-off, and two worlds run side by side on two threads (check does so);
//   threads  one thread per rank, real concurrency: for benchmarks that time transfers, and for ThreadSanitizer
//            to look for races between ranks.
// The environment variable MOE_INPROC_RANKS=fibers|threads changes the default (tools/sanitize tsan sets threads).
//
// Same semantics as MpiCommunicator (communicator.hpp) either way, plus what one process makes possible:
//   - deterministic: reductions sum in rank order; collectives never depend on scheduling;
//   - no hangs: if a rank throws, the world is aborted (ranks waiting in a collective or a recv wake up with
//     WorldAborted) and run() rethrows the first exception; if every live rank waits for something no rank can
//     provide (mismatched sends, a rank that returned early), run() throws WorldAborted naming each rank's wait.
#pragma once

#include "distributed/comm/communicator.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>

namespace moe {

// The world stopped: thrown inside ranks when another rank failed, and by run() on a deadlock.
class WorldAborted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class RankExecution { fibers, threads };

// MOE_INPROC_RANKS, or fibers when it is unset; throws std::invalid_argument on any other value.
RankExecution default_rank_execution();

class InprocWorld {
 public:
  // A stack (and under threads a thread) per rank: past this many, a world is a job for mpirun.
  static constexpr int kMaxRanks = 1024;
  // What one rank costs besides what its code allocates: the pages of its stack it touches and its communicators'
  // state. For memory estimates (dist::inproc_world_bytes); measured about 160 KiB a rank (check --world 16 and 128).
  static constexpr std::uint64_t kRankBytes = std::uint64_t(256) << 10;
  // Throws std::invalid_argument unless 1 <= size <= kMaxRanks (require_size).
  explicit InprocWorld(int size, RankExecution execution = default_rank_execution());
  // The constructor's refusal, for a caller that sizes a world before making it (a memory estimate).
  static void require_size(int size);

  int size() const { return size_; }
  RankExecution execution() const { return execution_; }

  // Runs fn(comm) on every rank, each run on a fresh world, and returns when all ranks have returned.
  void run(const std::function<void(Communicator&)>& fn) const;

 private:
  int size_;
  RankExecution execution_;
};

// A world of one rank on the calling thread, with no InprocWorld::run around it: the bootstrap of a job that is one
// process (check --backend nccl in a build without MPI). Its collectives return at once.
std::unique_ptr<Communicator> single_rank_communicator();

}  // namespace moe
