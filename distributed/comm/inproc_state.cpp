#include "distributed/comm/inproc_state.hpp"

#include "distributed/comm/inproc_world.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace moe::inproc {

WorldState::WorldState(int size) : ranks_(static_cast<std::size_t>(size)) {}

void WorldState::wait(std::unique_lock<std::mutex>& lock, int global_rank, const std::string& what,
                      const std::function<bool()>& ready) {
  if (aborted_) throw WorldAborted("world aborted: " + reason_);
  if (ready()) return;
  RankState& me = ranks_[std::size_t(global_rank)];
  me.waiting_for = &what;
  me.ready = &ready;
  abort_if_deadlocked();
  if (fibers_) {
    // One thread runs every rank: the lock is free whenever this rank does not run.
    while (!aborted_ && !ready()) {
      lock.unlock();
      fibers_->yield();
      lock.lock();
    }
  } else {
    me.changed.wait(lock, [&] { return aborted_ || ready(); });
  }
  me.waiting_for = nullptr;
  me.ready = nullptr;
  if (aborted_) throw WorldAborted("world aborted: " + reason_);
}

void WorldState::abort(const std::string& reason) {
  if (aborted_) return;
  aborted_ = true;
  reason_ = reason;
  notify_all();
}

bool WorldState::may_resume(int global_rank) const {
  const RankState& r = ranks_[std::size_t(global_rank)];
  return aborted_ || r.ready == nullptr || (*r.ready)();
}

void WorldState::notify(std::span<const int> global_ranks) {
  if (fibers_) return;  // the scheduler asks may_resume() instead
  for (int g : global_ranks) ranks_[std::size_t(g)].changed.notify_one();
}

void WorldState::notify_all() {
  if (fibers_) return;
  for (RankState& r : ranks_) r.changed.notify_one();
}

void WorldState::finish(int global_rank) {
  ranks_[std::size_t(global_rank)].finished = true;
  abort_if_deadlocked();  // a returned rank changes no one's condition; it can only make the world deadlocked
}

// Only a rank that is running can make another rank's condition true; if none is, nothing ever will.
void WorldState::abort_if_deadlocked() {
  if (aborted_) return;
  bool anyone_waiting = false;
  for (const RankState& r : ranks_) {
    if (r.finished) continue;
    if (r.ready == nullptr || (*r.ready)()) return;
    anyone_waiting = true;
  }
  if (!anyone_waiting) return;
  std::string report = "deadlock:";
  for (std::size_t g = 0; g < ranks_.size(); ++g) {
    report += " rank " + std::to_string(g) +
              (ranks_[g].finished ? " has returned;" : " waits in " + *ranks_[g].waiting_for + ";");
  }
  report.pop_back();
  abort(report);
}

Group::Group(std::shared_ptr<WorldState> world, std::vector<int> members, std::string name)
    : world_(std::move(world)),
      members_(std::move(members)),
      name_(std::move(name)),
      posts_{std::vector<Post>(members_.size()), std::vector<Post>(members_.size())},
      staged_{std::vector<std::vector<std::byte>>(members_.size()),
              std::vector<std::vector<std::byte>>(members_.size())},
      calls_(members_.size()),
      split_results_(members_.size()) {}

void Group::sync(std::unique_lock<std::mutex>& lock, int rank, const std::string& what,
                 const std::function<void()>& complete) {
  const std::uint64_t generation = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    complete();
    world_->notify(members_);
    return;
  }
  world_->wait(lock, members_[std::size_t(rank)], what, [&] { return generation_ != generation; });
}

void Group::check_posts(std::span<const Post> posts) {
  std::vector<CollectiveCall> calls;
  calls.reserve(posts.size());
  for (const Post& p : posts) calls.push_back(p.call);
  try {
    check_calls(calls);
    if (calls.front().kind == CollectiveKind::alltoallv) {
      std::vector<bool> indexed;
      for (const Post& p : posts) indexed.push_back(p.send_rows != nullptr);
      check_same_alltoallv_form(indexed);
    }
    error_.clear();
  } catch (const std::invalid_argument& e) {
    error_ = std::string(e.what()) + " [on " + name_ + "]";
  }
}

Group::Arrival Group::arrive(int rank, Post post) {
  const std::size_t r = std::size_t(rank);
  const std::size_t parity = calls_[r]++ & 1;
  std::vector<Post>& posts = posts_[parity];
  const std::size_t bytes = std::size_t(post.call.send_size) * element_size(post.call.type);
  if (post.send == nullptr || bytes == 0) {
    post.staged = true;  // nothing of this rank's is read
  } else if (bytes <= kStageBytes && post.send_rows == nullptr) {
    std::vector<std::byte>& copy = staged_[parity][r];  // free: every peer has finished reading it (see header)
    copy.resize(bytes);
    std::memcpy(copy.data(), post.send, bytes);
    post.send = copy.data();
    post.staged = true;
  }
  if (size() == 1) {
    posts[0] = std::move(post);
    check_posts(posts);
    if (!error_.empty()) throw std::invalid_argument(error_);
    return {posts, false};
  }
  const std::string what = std::string(collective_name(post.call.kind)) + " on " + name_;
  std::unique_lock lock(world_->mutex);
  posts[r] = std::move(post);
  sync(lock, rank, what, [&] {
    check_posts(posts);
    must_depart_[parity] = std::any_of(posts.begin(), posts.end(), [](const Post& p) { return !p.staged; });
  });
  if (!error_.empty()) throw std::invalid_argument(error_);
  return {posts, must_depart_[parity]};
}

void Group::depart(int rank, CollectiveKind kind) {
  const std::string what = std::string(collective_name(kind)) + " on " + name_ + " (peers still reading)";
  std::unique_lock lock(world_->mutex);
  sync(lock, rank, what, [] {});
}

// Runs once, by the last rank to arrive: groups by color, ranks within a group by (key, parent rank).
void Group::build_split(std::span<const Post> posts) {
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, int>>> by_color;
  for (int r = 0; r < size(); ++r)
    by_color[posts[std::size_t(r)].call.color].emplace_back(posts[std::size_t(r)].call.key, r);
  for (auto& [color, ranks] : by_color) {
    std::sort(ranks.begin(), ranks.end());
    std::vector<int> members;
    for (const auto& [key, r] : ranks) members.push_back(members_[std::size_t(r)]);
    auto group = std::make_shared<Group>(world_, std::move(members), name_ + "/split(" + std::to_string(color) + ")");
    for (std::size_t i = 0; i < ranks.size(); ++i) split_results_[std::size_t(ranks[i].second)] = {group, int(i)};
  }
}

std::pair<std::shared_ptr<Group>, int> Group::split(int rank, const CollectiveCall& call) {
  const std::string what = "split on " + name_;
  std::vector<Post>& posts = posts_[calls_[std::size_t(rank)]++ & 1];
  std::unique_lock lock(world_->mutex);
  posts[std::size_t(rank)] = Post{call, nullptr, nullptr, true};
  sync(lock, rank, what, [&] {
    check_posts(posts);
    if (error_.empty()) build_split(posts);  // the calls fit, so every rank called split
  });
  if (!error_.empty()) throw std::invalid_argument(error_);
  return std::exchange(split_results_[std::size_t(rank)], {});
}

void Group::send(int source, int dest, int tag, Message message) {
  std::lock_guard lock(world_->mutex);
  mailbox_[{source, dest, tag}].push_back(std::move(message));
  const int receiver = members_[std::size_t(dest)];
  world_->notify(std::span(&receiver, 1));
}

Message Group::recv(int dest, int source, int tag) {
  const std::string what = "recv from rank " + std::to_string(source) + " tag " + std::to_string(tag) + " on " + name_;
  std::unique_lock lock(world_->mutex);
  std::deque<Message>& queue = mailbox_[{source, dest, tag}];
  world_->wait(lock, members_[std::size_t(dest)], what, [&] { return !queue.empty(); });
  Message message = std::move(queue.front());
  queue.pop_front();
  return message;
}

}  // namespace moe::inproc
