// Harness `layout`: the layout validators, on one line of text such as "world=8,tp=2,ep=4".
//
// The same text is read twice:
//   1. by parse_layout (cli/run_options.hpp), the strict reader of --resume-as and --layout: whole numbers >= 1 of
//      at most 9 digits, known keys given once, then layout_from_sizes and ParallelLayout::validate;
//   2. leniently, straight into a ParallelLayout — any key of the struct (world, tp, cp, pp, ep, etp, gtp, egtp,
//      order) with any int, negative and huge ones included, as a Python binding or a dump.json can hand it over —
//      then validate() alone; "gb=" and "mb=" add a num_microbatches(gb, mb) call on a valid layout.
// Invariants of a layout either path accepts: dp·tp·cp·pp = world = edp·etp·ep·pp; and, for worlds up to 64, every
// process group kind partitions the ranks, group(kind, r) holds r at position rank_in(kind, r), and is the group of
// all_groups(kind) that holds r. Only std::invalid_argument may be thrown.
#include "cli/run_options.hpp"
#include "fuzz/fuzz_support.hpp"
#include "reference/parallel_layout.hpp"
#include "reference/process_groups.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using moe::GroupKind;
using moe::ParallelLayout;

constexpr int kMaxEnumeratedWorld = 64;  // larger worlds check the sizes only

std::string describe(const ParallelLayout& l) {
  return "world " + std::to_string(l.world) + " tp " + std::to_string(l.tp) + " cp " + std::to_string(l.cp) +
         " pp " + std::to_string(l.pp) + " ep " + std::to_string(l.ep) + " etp " + std::to_string(l.etp) +
         " order " + l.order;
}

void check_groups(const ParallelLayout& l) {
  const long long dense = 1LL * l.dp() * l.tp * l.cp * l.pp, expert = 1LL * l.edp() * l.etp * l.ep * l.pp;
  if (dense != l.world || expert != l.world)
    moe::fuzz::finding("validated layout whose meshes do not multiply to the world: " + describe(l));
  if (l.world > kMaxEnumeratedWorld) return;
  const moe::ProcessGroups groups(l);
  for (const GroupKind kind : moe::all_group_kinds()) {
    const auto all = groups.all_groups(kind);
    std::vector<int> seen(static_cast<std::size_t>(l.world), 0);
    std::vector<std::size_t> owner(static_cast<std::size_t>(l.world), 0);  // rank -> the index of its group in all
    for (std::size_t gi = 0; gi < all.size(); ++gi)
      for (const int r : all[gi]) {
        if (r < 0 || r >= l.world) moe::fuzz::finding("group rank out of range in " + describe(l));
        ++seen[static_cast<std::size_t>(r)];
        owner[static_cast<std::size_t>(r)] = gi;
      }
    if (std::any_of(seen.begin(), seen.end(), [](int n) { return n != 1; }))
      moe::fuzz::finding(std::string(moe::to_string(kind)) + " groups do not partition the ranks of " + describe(l));
    for (int r = 0; r < l.world; ++r) {
      const std::vector<int> mine = groups.group(kind, r);
      const auto at = std::find(mine.begin(), mine.end(), r);
      if (at == mine.end() || at - mine.begin() != groups.rank_in(kind, r) ||
          mine != all[owner[static_cast<std::size_t>(r)]])
        moe::fuzz::finding(std::string(moe::to_string(kind)) + " group of rank " + std::to_string(r) +
                           " is inconsistent in " + describe(l));
    }
  }
}

// "key=value" items separated by commas or spaces; a value that is not an int leaves the field as it is.
struct Lenient {
  ParallelLayout layout;
  std::optional<int> global_batch, micro_batch;
};

std::optional<int> to_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    return std::nullopt;
  return static_cast<int>(v);
}

Lenient read_lenient(const std::string& text) {
  Lenient out;
  std::string item;
  const auto take = [&] {
    const auto eq = item.find('=');
    if (eq != std::string::npos) {
      const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
      ParallelLayout& l = out.layout;
      if (key == "order") {
        l.order = value;
      } else if (const auto v = to_int(value)) {
        if (key == "world") l.world = *v;
        else if (key == "tp") l.tp = *v;
        else if (key == "cp") l.cp = *v;
        else if (key == "pp") l.pp = *v;
        else if (key == "ep") l.ep = *v;
        else if (key == "etp") l.etp = *v;
        else if (key == "gtp") l.gtp = *v;
        else if (key == "egtp") l.egtp = *v;
        else if (key == "gb") out.global_batch = *v;
        else if (key == "mb") out.micro_batch = *v;
      }
    }
    item.clear();
  };
  for (const char c : text) {
    if (c == ',' || c == ' ' || c == '\n') take();
    else item += c;
  }
  take();
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > 512) return 0;  // a layout is one short line; longer inputs only slow the search down
  const std::string text(moe::fuzz::as_text(data, size));
  try {
    check_groups(moe::cli::parse_layout(text, "--layout"));
  } catch (const std::invalid_argument&) {
  }
  const Lenient lenient = read_lenient(text);
  try {
    lenient.layout.validate();
  } catch (const std::invalid_argument&) {
    return 0;
  }
  check_groups(lenient.layout);
  if (lenient.global_batch && lenient.micro_batch) {
    try {
      const int m = moe::num_microbatches(lenient.layout, *lenient.global_batch, *lenient.micro_batch);
      if (1LL * m * *lenient.micro_batch * lenient.layout.dp() != *lenient.global_batch)
        moe::fuzz::finding("num_microbatches " + std::to_string(m) + " does not split the batch of " +
                           describe(lenient.layout));
    } catch (const std::invalid_argument&) {
    }
  }
  return 0;
}
