#include "distributed/comm/inproc_state.hpp"

#include "distributed/comm/inproc_world.hpp"

#include <algorithm>
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
  changed_.wait(lock, [&] { return aborted_ || ready(); });
  me.waiting_for = nullptr;
  me.ready = nullptr;
  if (aborted_) throw WorldAborted("world aborted: " + reason_);
}

void WorldState::abort(const std::string& reason) {
  if (aborted_) return;
  aborted_ = true;
  reason_ = reason;
  changed_.notify_all();
}

void WorldState::finish(int global_rank) {
  ranks_[std::size_t(global_rank)].finished = true;
  abort_if_deadlocked();
  changed_.notify_all();
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
      posts_(members_.size()),
      split_results_(members_.size()) {}

void Group::sync(std::unique_lock<std::mutex>& lock, int rank, const std::string& what,
                 const std::function<void()>& complete) {
  const std::uint64_t generation = generation_;
  if (++arrived_ == size()) {
    arrived_ = 0;
    ++generation_;
    complete();
    world_->notify();
    return;
  }
  world_->wait(lock, members_[std::size_t(rank)], what, [&] { return generation_ != generation; });
}

void Group::check_posts() {
  std::vector<CollectiveCall> calls;
  calls.reserve(posts_.size());
  for (const Post& p : posts_) calls.push_back(p.call);
  try {
    check_calls(calls);
    error_.clear();
  } catch (const std::invalid_argument& e) {
    error_ = std::string(e.what()) + " [on " + name_ + "]";
  }
}

std::span<const Post> Group::arrive(int rank, Post post) {
  const std::string what = std::string(collective_name(post.call.kind)) + " on " + name_;
  std::unique_lock lock(world_->mutex);
  posts_[std::size_t(rank)] = std::move(post);
  sync(lock, rank, what, [this] { check_posts(); });
  if (!error_.empty()) throw std::invalid_argument(error_);
  return posts_;
}

void Group::depart(int rank, CollectiveKind kind) {
  const std::string what = std::string(collective_name(kind)) + " on " + name_ + " (peers still reading)";
  std::unique_lock lock(world_->mutex);
  sync(lock, rank, what, [] {});
}

// Runs once, by the last rank to arrive: groups by color, ranks within a group by (key, parent rank).
void Group::build_split() {
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, int>>> by_color;
  for (int r = 0; r < size(); ++r)
    by_color[posts_[std::size_t(r)].call.color].emplace_back(posts_[std::size_t(r)].call.key, r);
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
  std::unique_lock lock(world_->mutex);
  posts_[std::size_t(rank)] = Post{call, nullptr, nullptr};
  sync(lock, rank, what, [this] {
    check_posts();
    if (error_.empty()) build_split();  // the calls fit, so every rank called split
  });
  if (!error_.empty()) throw std::invalid_argument(error_);
  return std::exchange(split_results_[std::size_t(rank)], {});
}

void Group::send(int source, int dest, int tag, Message message) {
  std::lock_guard lock(world_->mutex);
  mailbox_[{source, dest, tag}].push_back(std::move(message));
  world_->notify();
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
