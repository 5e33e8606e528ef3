// Kill-at-random: a child process writes a new version of a folder over an existing good one at the same path and
// is SIGKILLed after a random delay; then the path must hold the complete old version or the complete new one.
// Whatever the kill left beside the target (a staging folder, the old version renamed aside) is classified too, so
// the counts show which window of the write each kill landed in:
//   old at the target, nothing beside it            before the writer staged anything
//   old at the target, a partial folder beside it   while the new version was being staged
//   old at the target, the complete new beside it   staged and synced, before the rename
//   new at the target, the complete old beside it   after the rename, before the old version was removed
//   new at the target, a partial folder beside it   while the old version was being removed
//   new at the target, nothing beside it            after the writer finished (or was killed at its very end)
//   nothing at the target, the complete old beside  between the two renames of the rename-aside fallback: the
//                                                   reader (identify) must put the old version back and read it
// Anything else — the target neither version, or missing (except, with the fallback, while the complete old
// version is beside it and the reader restores it) — is damage.
// The delays count from the moment the child starts. 40 % of them are drawn uniformly over 1.3 times the duration
// of an uninterrupted write (the median of five, measured first). The windows around the rename last microseconds,
// so the other 60 % follow a staircase on the rename moment: starting from the delay that best separates the kills
// that left the old version from those that left the new one, each kill that left the old version moves the next
// delay later, each that left the new one earlier, in steps that shrink to 10 µs; the scheduler's jitter spreads
// them over both sides of the rename. With --widen-us the writer also sleeps in those windows (timing only), so that
// each of them is hit, not just the long ones.
//
// The folders are on a RAM file system (/dev/shm) unless --dir says otherwise: a SIGKILL ends the process, not the
// kernel, so what it can leave behind depends on the order of the writes and renames, not on whether fsync reached
// the disk — and on a busy disk each fsync costs milliseconds, too slow for hundreds of kills. --dir /tmp runs the
// same on a disk.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace moe::storage::test {

enum class Version { old_version, new_version };

struct KillTarget {
  std::filesystem::path target;  // alone in its parent folder: everything else there is a leftover of a kill
  std::function<void()> restore_old;  // puts the complete old version at `target` (not timed)
  std::function<void()> write_new;    // the writer under test; runs in the child
  // Which version a folder holds; throws when it is neither (incomplete, corrupt, missing).
  std::function<Version(const std::filesystem::path&)> identify;
};

struct KillReport {
  std::map<std::string, int> windows;  // label -> kills that landed there
  std::vector<std::string> damage;     // one line per damaged target
  int writer_failures = 0;             // children that exited with an error instead of being killed
  double write_ms = 0;                 // an uninterrupted write, measured before the kills
  double rename_ms = 0;                // when the rename happened, as the uniform kills place it
};

// The command line of a kill test: [ITERATIONS [SEED]] [--rename-aside] [--widen-us N] [--dir PATH].
//   --rename-aside  forces the fallback used where renameat2(RENAME_EXCHANGE) is unavailable (its window, where the
//                   target is missing and the old version is complete beside it, is counted separately)
//   --widen-us N    the writer sleeps N µs in each window around the rename (MOE_ORACLE_COMMIT_PAUSE_US,
//                   staged_directory.hpp), so that some kills land in windows that otherwise last microseconds
struct KillOptions {
  int iterations = 200;
  std::uint64_t seed = std::random_device{}();
  bool rename_aside = false;
  int widen_us = 0;
  std::filesystem::path dir;  // where the test makes its folders
};

inline KillOptions parse_kill_options(int argc, char** argv) {
  KillOptions o;
  o.dir = ::access("/dev/shm", W_OK) == 0 ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
  std::vector<std::string> numbers;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--rename-aside") o.rename_aside = true;
    else if (arg == "--dir" && i + 1 < argc) o.dir = argv[++i];
    else if (arg == "--widen-us" && i + 1 < argc) o.widen_us = std::stoi(argv[++i]);
    else numbers.push_back(arg);
  }
  if (!numbers.empty()) o.iterations = std::stoi(numbers[0]);
  if (numbers.size() > 1) o.seed = std::stoull(numbers[1]);
  // Read by StagedDirectory::commit in the writer, a child of this process.
  if (o.rename_aside) ::setenv("MOE_ORACLE_NO_RENAME_EXCHANGE", "1", 1);
  if (o.widen_us > 0) ::setenv("MOE_ORACLE_COMMIT_PAUSE_US", std::to_string(o.widen_us).c_str(), 1);
  return o;
}

namespace detail {

inline void remove_leftovers(const std::filesystem::path& target) {
  for (const auto& e : std::filesystem::directory_iterator(target.parent_path()))
    if (e.path().filename() != target.filename()) std::filesystem::remove_all(e.path());
}

// Runs write_new in a child; kills it `delay` after the child started (never, when nullopt): the child says when
// through a pipe, so that the time fork() takes on a busy machine does not blur the delays. Returns the child's
// wait status and, through `took`, how long it ran from that moment.
inline int run_child(const KillTarget& t, std::optional<std::chrono::microseconds> delay, double* took_ms = nullptr) {
  std::cout.flush();
  int started[2];
  if (::pipe(started) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::close(started[0]);
    const char go = 1;
    if (::write(started[1], &go, 1) != 1) ::_exit(3);
    try {
      t.write_new();
    } catch (const std::exception& e) {
      std::cerr << "writer: " << e.what() << "\n";
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(started[1]);
  char go = 0;
  while (::read(started[0], &go, 1) < 0) {
  }
  ::close(started[0]);
  const auto start = std::chrono::steady_clock::now();
  if (delay) {
    std::this_thread::sleep_for(*delay);
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
  }
  if (took_ms) *took_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  return status;
}

// The delay that best separates kills that left the old version from those that left the new one: the threshold
// with the fewest kills on the wrong side.
inline double rename_moment(std::vector<std::pair<double, bool>> landed) {
  std::sort(landed.begin(), landed.end());
  std::size_t wrong = 0;  // threshold before every kill: every old one is on the wrong side
  for (const auto& l : landed) wrong += l.second ? 0 : 1;
  std::size_t best = wrong, at = 0;
  for (std::size_t k = 0; k < landed.size(); ++k) {
    wrong = landed[k].second ? wrong + 1 : wrong - 1;  // kill k moves to the "before" side
    if (wrong < best) {
      best = wrong;
      at = k + 1;
    }
  }
  if (at == 0) return landed.empty() ? 0 : landed.front().first;
  if (at == landed.size()) return landed.back().first;
  return (landed[at - 1].first + landed[at].first) / 2;
}

inline std::string state_of(const KillTarget& t, const std::filesystem::path& p) {
  try {
    return t.identify(p) == Version::old_version ? "old" : "new";
  } catch (const std::exception&) {
    return "partial";
  }
}

}  // namespace detail

// Classifies what a kill left (see the table above); damage goes to report.damage. Returns whether the new version
// was at the target.
inline bool classify(const KillTarget& t, bool exited, bool rename_aside, KillReport& report) {
  namespace fs = std::filesystem;
  std::vector<std::string> beside;
  for (const auto& e : fs::directory_iterator(t.target.parent_path()))
    if (e.path().filename() != t.target.filename()) beside.push_back(detail::state_of(t, e.path()));
  std::sort(beside.begin(), beside.end());
  const auto has = [&](const std::string& s) { return std::find(beside.begin(), beside.end(), s) != beside.end(); };
  std::string at;
  if (!fs::exists(t.target)) {
    at = "missing";
  } else {
    try {
      at = t.identify(t.target) == Version::old_version ? "old" : "new";
    } catch (const std::exception& e) {
      report.damage.push_back(std::string("the target is neither version: ") + e.what());
      return false;
    }
  }
  std::string label;
  if (at == "old" && beside.empty()) label = "old at the target: before the writer staged anything";
  else if (at == "old" && has("new")) label = "old at the target: staged and synced, before the rename";
  else if (at == "old" && has("partial")) label = "old at the target: while the new version was being staged";
  else if (at == "new" && has("old")) label = "new at the target: after the rename, before the old was removed";
  else if (at == "new" && has("partial")) label = "new at the target: while the old version was being removed";
  else if (at == "new" && beside.empty())
    label = exited ? "new at the target: the writer had finished" : "new at the target: killed at the very end";
  else if (at == "missing" && has("old") && rename_aside) {
    // The reader puts the old version back (StagedDirectory::recover): what it reads at the target is the old one.
    try {
      if (t.identify(t.target) == Version::old_version)
        label = "none at the target: between the two renames (rename-aside), old put back by the reader";
    } catch (const std::exception& e) {
      report.damage.push_back(std::string("the target is missing and the reader did not put it back: ") + e.what());
      return false;
    }
  }
  if (label.empty()) {
    std::string what = "target " + at + ", beside it:";
    for (const auto& b : beside) what += " " + b;
    report.damage.push_back(what);
    return at == "new";
  }
  ++report.windows[label];
  return at == "new";
}

inline KillReport kill_at_random(const KillTarget& t, const KillOptions& options) {
  const int iterations = options.iterations;
  KillReport report;
  // The duration of an uninterrupted write: the median of five (fsync times vary).
  std::vector<double> durations;
  for (int i = 0; i < 5; ++i) {
    t.restore_old();
    detail::remove_leftovers(t.target);
    double ms = 0;
    const int status = detail::run_child(t, std::nullopt, &ms);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++report.writer_failures;
    if (t.identify(t.target) != Version::new_version)
      report.damage.push_back("an uninterrupted write left no new version");
    durations.push_back(ms);
  }
  std::sort(durations.begin(), durations.end());
  report.write_ms = durations[2];
  std::mt19937_64 rng(options.seed);
  const double span_us = report.write_ms * 1300;
  const int uniform = iterations * 2 / 5;
  std::vector<std::pair<double, bool>> landed;  // delay, new version at the target
  double centre = 0, step = span_us / 20;
  for (int i = 0; i < iterations; ++i) {
    if (i == uniform) report.rename_ms = (centre = detail::rename_moment(landed)) / 1000;
    const double delay = i < uniform ? std::uniform_real_distribution<double>(0, span_us)(rng) : std::max(0.0, centre);
    t.restore_old();
    detail::remove_leftovers(t.target);
    const int status = detail::run_child(t, std::chrono::microseconds(static_cast<std::int64_t>(delay)));
    const bool exited = WIFEXITED(status);
    if (exited && WEXITSTATUS(status) != 0) ++report.writer_failures;
    const bool new_at_target = classify(t, exited, options.rename_aside, report);
    landed.emplace_back(delay, new_at_target);
    if (i >= uniform) {
      centre += new_at_target ? -step : step;
      step = std::max(10.0, step * 0.9);
    }
  }
  detail::remove_leftovers(t.target);
  return report;
}

// Prints the counts; returns the exit status of a test program (0: no damage, no writer failure, and kills landed
// both before and after the rename, so that the delays covered the write).
inline int print_report(const std::string& what, const KillOptions& o, const KillReport& r) {
  std::cout << what << (o.rename_aside ? " (rename-aside fallback)" : "")
            << (o.widen_us ? ", windows around the rename widened by " + std::to_string(o.widen_us) + " us" : "")
            << " in " << o.dir.string() << ": "
            << o.iterations << " kills at random (seed " << o.seed << "), an uninterrupted write takes "
            << r.write_ms << " ms; 40 % of the kills over the whole write, 60 % around the rename (first placed at "
            << r.rename_ms << " ms)\n";
  int before = 0, between = 0, after = 0;
  for (const auto& [label, n] : r.windows) {
    std::cout << "  " << n << "\t" << label << "\n";
    (label.rfind("old", 0) == 0 ? before : label.rfind("none", 0) == 0 ? between : after) += n;
  }
  std::cout << "  kills before the rename: " << before << ", between the fallback's two renames: " << between
            << ", after the rename: " << after << "\n";
  std::cout << "  damaged targets: " << r.damage.size() << ", writer failures: " << r.writer_failures << "\n";
  for (std::size_t i = 0; i < std::min<std::size_t>(r.damage.size(), 5); ++i)
    std::cout << "    " << r.damage[i] << "\n";
  if (!r.damage.empty() || r.writer_failures > 0) return 1;
  if (before == 0 || after == 0) {
    std::cout << "  the kills did not land both before and after the rename\n";
    return 1;
  }
  return 0;
}

}  // namespace moe::storage::test
