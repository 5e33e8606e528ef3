// The shared state behind in-process ranks (internal to the in-process backend).
//
// WorldState: one per InprocWorld::run. Its single mutex guards everything the ranks share, including every
// Group's rendezvous and mailbox: ranks are few, data is copied outside the lock, and with one lock, aborting and
// deadlock detection see a consistent picture of every rank.
//
// Group: one per communicator (the world and each split). A collective is two rendezvous:
//   arrive   every rank posts its call and buffers; the last to arrive checks the calls of all ranks
//            (check_calls) and, for split, builds the sub-groups. Then every rank reads its peers' send buffers
//            directly and writes only its own receive buffer.
//   depart   nobody leaves until everyone has finished reading, so send buffers stay valid and unchanged.
// Point-to-point messages are copied into a per-(source, dest, tag) queue: send never blocks.
#pragma once

#include "distributed/comm/collective_call.hpp"

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
  // With the lock held: wake waiters to re-check their condition.
  void notify() { changed_.notify_all(); }
  // With the lock held: stop the world; the first reason wins.
  void abort(const std::string& reason);
  // With the lock held: the rank's function has returned or thrown.
  void finish(int global_rank);

  bool aborted() const { return aborted_; }
  const std::string& abort_reason() const { return reason_; }

 private:
  struct RankState {
    bool finished = false;
    const std::string* waiting_for = nullptr;      // set while blocked in wait()
    const std::function<bool()>* ready = nullptr;  // its condition, evaluated by the deadlock check
  };
  void abort_if_deadlocked();

  std::condition_variable changed_;
  std::vector<RankState> ranks_;
  bool aborted_ = false;
  std::string reason_;
};

struct Post {
  CollectiveCall call;
  const void* send = nullptr;
  void* recv = nullptr;
};

struct Message {
  ElementType type = ElementType::f64;
  std::int64_t count = 0;
  std::vector<std::byte> bytes;
};

class Group {
 public:
  // members[r] is the global rank of group rank r; name appears in error and deadlock messages.
  Group(std::shared_ptr<WorldState> world, std::vector<int> members, std::string name);

  int size() const { return int(members_.size()); }

  // Posts this rank's call and waits for all. Returns every rank's post, valid until depart(). Throws
  // std::invalid_argument (on every rank alike) if the calls do not fit together.
  std::span<const Post> arrive(int rank, Post post);
  void depart(int rank, CollectiveKind kind);
  // A split collective: returns this rank's new group and its rank in it.
  std::pair<std::shared_ptr<Group>, int> split(int rank, const CollectiveCall& call);

  void send(int source, int dest, int tag, Message message);
  Message recv(int dest, int source, int tag);

 private:
  // With the lock held: waits until all members have called; the last to arrive runs complete() first.
  void sync(std::unique_lock<std::mutex>& lock, int rank, const std::string& what,
            const std::function<void()>& complete);
  void check_posts();
  void build_split();

  std::shared_ptr<WorldState> world_;
  std::vector<int> members_;
  std::string name_;

  std::vector<Post> posts_;
  int arrived_ = 0;
  std::uint64_t generation_ = 0;
  std::string error_;  // check_calls' verdict on the last completed arrival; empty if the calls fit
  std::vector<std::pair<std::shared_ptr<Group>, int>> split_results_;

  std::map<std::tuple<int, int, int>, std::deque<Message>> mailbox_;  // (source, dest, tag) → messages in order
};

}  // namespace moe::inproc
