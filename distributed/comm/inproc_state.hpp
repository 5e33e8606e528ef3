// The shared state behind in-process ranks (internal to the in-process backend).
//
// WorldState: one per InprocWorld::run. Its single mutex guards everything the ranks share, including every
// Group's rendezvous and mailbox: ranks are few, data is copied outside the lock, and with one lock, aborting and
// deadlock detection see a consistent picture of every rank. wait() is the only place a rank blocks: a thread
// sleeps on its own condition variable, a fiber yields to the FiberScheduler (fiber.hpp) with the lock released.
//
// Group: one per communicator (the world and each split). A collective is one or two rendezvous:
//   arrive   every rank posts its call and buffers; the last to arrive checks the calls of all ranks
//            (check_calls) and, for split, builds the sub-groups. Then every rank reads its peers' send data
//            and writes only its own receive buffer.
//   depart   only when some rank's send data is large: nobody leaves until everyone has finished reading, so
//            send buffers stay valid and unchanged.
// Small send data (≤ kStageBytes) is copied into the group at arrive instead, so the rank may return and reuse
// its buffer at once: the copies and posts alternate between two slots by call parity, and a rank cannot post
// twice more before every peer has finished reading (its next arrival completes only when all peers arrived
// there too). On two cores the second rendezvous was half of all wake-ups of a check run.
// A group of one rank needs no rendezvous and takes no lock.
// Point-to-point messages are copied into a per-(source, dest, tag) queue: send never blocks.
#pragma once

#include "distributed/comm/collective_call.hpp"
#include "distributed/comm/fiber.hpp"
#include "distributed/comm/row_exchange.hpp"

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace moe::inproc {

class WorldState {
 public:
  explicit WorldState(int size);

  std::mutex mutex;

  // With `lock` held on `mutex`: returns once ready() holds. Throws WorldAborted if the world is or becomes
  // aborted. `what` names the wait in a deadlock report; a wait is a deadlock when every rank that has not
  // returned is waiting and none of their ready() holds.
  void wait(std::unique_lock<std::mutex>& lock, int global_rank, const std::string& what,
            const std::function<bool()>& ready);
  // With the lock held: wake these ranks (global numbers) to re-check their condition. Only the ranks whose
  // condition may have changed are woken: with one shared condition variable every collective woke the whole
  // world, and on two cores those wake-ups were most of an in-process run's time.
  void notify(std::span<const int> global_ranks);
  // With the lock held: stop the world; the first reason wins.
  void abort(const std::string& reason);
  // With the lock held: the rank's function has returned or thrown.
  void finish(int global_rank);

  // The ranks run as fibers of `scheduler` (InprocWorld::run) instead of threads: wait() yields to it instead of
  // sleeping, and it asks may_resume() (with the lock held) before switching back to a waiting rank.
  void run_as_fibers(FiberScheduler* scheduler) { fibers_ = scheduler; }
  bool may_resume(int global_rank) const;

  bool aborted() const { return aborted_; }
  const std::string& abort_reason() const { return reason_; }

 private:
  struct RankState {
    std::condition_variable changed;  // waited on by this rank only
    bool finished = false;
    const std::string* waiting_for = nullptr;      // set while blocked in wait()
    const std::function<bool()>* ready = nullptr;  // its condition, evaluated by the deadlock check
  };
  void abort_if_deadlocked();

  void notify_all();

  std::vector<RankState> ranks_;  // sized once: a condition variable does not move
  FiberScheduler* fibers_ = nullptr;
  bool aborted_ = false;
  std::string reason_;
};

struct Post {
  CollectiveCall call;
  const void* send = nullptr;
  void* recv = nullptr;
  bool staged = false;  // send points at the group's copy, not at the rank's buffer
  const RowBlocks* send_rows = nullptr;  // alltoallv_indexed: the rows of `send` peers read in place (never staged)
};

struct Message {
  ElementType type = ElementType::f64;
  std::int64_t count = 0;
  std::vector<std::byte> bytes;
};

class Group {
 public:
  static constexpr std::size_t kStageBytes = std::size_t(1) << 16;

  // What arrive() returns: every rank's post, valid until depart() when must_depart, else until this rank's next
  // collective on the group; `staged` posts point at the group's copy of the send data.
  struct Arrival {
    std::span<const Post> posts;
    bool must_depart = false;
  };

  // members[r] is the global rank of group rank r; name appears in error and deadlock messages.
  Group(std::shared_ptr<WorldState> world, std::vector<int> members, std::string name);

  int size() const { return int(members_.size()); }

  // Posts this rank's call and waits for all. Throws std::invalid_argument (on every rank alike) if the calls
  // do not fit together.
  Arrival arrive(int rank, Post post);
  // The second rendezvous, when the arrival says so (on every rank alike).
  void depart(int rank, CollectiveKind kind);
  // A split collective: returns this rank's new group and its rank in it.
  std::pair<std::shared_ptr<Group>, int> split(int rank, const CollectiveCall& call);

  void send(int source, int dest, int tag, Message message);
  Message recv(int dest, int source, int tag);

 private:
  // With the lock held: waits until all members have called; the last to arrive runs complete() first.
  void sync(std::unique_lock<std::mutex>& lock, int rank, const std::string& what,
            const std::function<void()>& complete);
  void check_posts(std::span<const Post> posts);
  void build_split(std::span<const Post> posts);

  std::shared_ptr<WorldState> world_;
  std::vector<int> members_;
  std::string name_;

  // Indexed by call parity (see above), then by rank.
  std::array<std::vector<Post>, 2> posts_;
  std::array<std::vector<std::vector<std::byte>>, 2> staged_;
  std::array<bool, 2> must_depart_{};
  std::vector<std::uint64_t> calls_;  // calls_[r]: the collectives rank r has begun here; touched by r only
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::string error_;  // check_calls' verdict on the last completed arrival; empty if the calls fit
  std::vector<std::pair<std::shared_ptr<Group>, int>> split_results_;

  std::map<std::tuple<int, int, int>, std::deque<Message>> mailbox_;  // (source, dest, tag) → messages in order
};

}  // namespace moe::inproc
