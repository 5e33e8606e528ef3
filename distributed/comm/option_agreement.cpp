#include "distributed/comm/option_agreement.hpp"

#include <algorithm>
#include <stdexcept>

namespace moe {
namespace {

// The options as one text, name and value each ended by a NUL (neither can hold one: they come from argv).
std::string encode(const std::vector<GivenOption>& options) {
  std::string text;
  for (const auto& [name, value] : options) text += name + '\0' + value + '\0';
  return text;
}

std::vector<GivenOption> decode(const std::string& text) {
  std::vector<GivenOption> out;
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t name_end = text.find('\0', at);
    const std::size_t value_end = text.find('\0', name_end + 1);
    out.emplace_back(text.substr(at, name_end - at), text.substr(name_end + 1, value_end - name_end - 1));
    at = value_end + 1;
  }
  return out;
}

const std::string* value_of(const std::vector<GivenOption>& options, const std::string& name) {
  for (const auto& o : options)
    if (o.first == name) return &o.second;
  return nullptr;
}

std::string shown(const std::string* value) {
  if (value == nullptr) return "not given";
  return value->empty() ? "given" : *value;
}

}  // namespace

void require_same_options(Communicator& world, const std::vector<GivenOption>& options) {
  const std::string mine = encode(options);
  std::vector<std::int64_t> length{static_cast<std::int64_t>(mine.size())};
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(world.size()));
  world.allgather<std::int64_t>(length, lengths);
  std::int64_t total = 0;
  for (const std::int64_t n : lengths) total += n;
  std::vector<std::int32_t> send(mine.begin(), mine.end()), all(static_cast<std::size_t>(total));
  world.allgatherv<std::int32_t>(send, all, lengths);

  std::vector<std::vector<GivenOption>> of_rank;
  std::size_t at = 0;
  for (const std::int64_t n : lengths) {
    std::string text;
    for (std::int64_t i = 0; i < n; ++i) text += static_cast<char>(all[at++]);
    of_rank.push_back(decode(text));
  }
  // Every option name any rank gave, rank 0's first, in the order given.
  std::vector<std::string> names;
  for (const auto& rank_options : of_rank)
    for (const auto& o : rank_options)
      if (std::find(names.begin(), names.end(), o.first) == names.end()) names.push_back(o.first);
  for (const std::string& name : names) {
    const std::string* root = value_of(of_rank[0], name);
    const auto differs = [&](const std::string* v) { return (v == nullptr) != (root == nullptr) || (v && *v != *root); };
    std::vector<std::size_t> ranks;
    for (std::size_t r = 1; r < of_rank.size(); ++r)
      if (differs(value_of(of_rank[r], name))) ranks.push_back(r);
    if (ranks.empty()) continue;
    std::string differing;
    for (const std::size_t r : ranks) differing += (differing.empty() ? "" : ", ") + std::to_string(r);
    const std::string* first = value_of(of_rank[ranks[0]], name);  // the first differing rank's value
    const std::size_t count = ranks.size();
    throw std::invalid_argument("the ranks were started with different options: " + name + " is " + shown(root) +
                                " on rank 0 but " + shown(first) + " on rank" + (count > 1 ? "s " : " ") +
                                differing + " (every rank of the job must get the same command line)");
  }
}

}  // namespace moe
