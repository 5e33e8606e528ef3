// ctest golden.kill_at_random[_rename_aside]: a golden case written (write_case, as `golden write` does) over an
// existing case at the same path by a child process killed at a random moment (storage/tests/kill_harness.hpp)
// leaves the complete old case or the complete new one: it reads, and its every tensor is one version's.
// Usage: golden_kill_test [ITERATIONS [SEED]] [--rename-aside] [--widen-us N] [--dir PATH]  (kill_harness.hpp)
#include "golden/case_oracle.hpp"
#include "golden/golden_case.hpp"
#include "storage/tests/kill_harness.hpp"

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

namespace {

bool same(const moe::golden::GoldenCase& a, const moe::golden::GoldenCase& b) {
  if (a.header.description != b.header.description || a.tensors.size() != b.tensors.size()) return false;
  for (const auto& [name, array] : a.tensors) {
    const auto it = b.tensors.find(name);
    if (it == b.tensors.end() || it->second.shape != array.shape || it->second.as_doubles() != array.as_doubles())
      return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using moe::storage::test::Version;
  const auto options = moe::storage::test::parse_kill_options(argc, argv);

  moe::MoeConfig config;
  config.hidden = 8;
  config.num_experts = 4;
  config.topk = 2;
  config.ffn_hidden = 4;
  config.score_function = moe::ScoreFunction::sigmoid;
  config.shared_expert_ffn_hidden = 4;
  const auto old_case = moe::golden::oracle_case(config, 4, 2, 16, 1, {}, "old");
  const auto new_case = moe::golden::oracle_case(config, 4, 2, 16, 2, {}, "new");

  const fs::path root = options.dir / ("moe_golden_kill_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  moe::storage::test::KillTarget t;
  t.target = root / "area" / "case";
  t.restore_old = [&] {
    fs::remove_all(t.target);
    fs::create_directories(t.target.parent_path());
    fs::copy(root / "pristine", t.target, fs::copy_options::recursive);
  };
  t.write_new = [&] { moe::golden::write_case(t.target, new_case); };
  t.identify = [&](const fs::path& dir) {
    const moe::golden::GoldenCase c = moe::golden::read_case(dir);
    if (same(c, old_case)) return Version::old_version;
    if (same(c, new_case)) return Version::new_version;
    throw std::runtime_error(dir.string() + " reads, but holds neither version");
  };
  moe::golden::write_case(root / "pristine", old_case);

  // The check can fail: a case without one of its tensors is not a version.
  t.restore_old();
  fs::remove(t.target / "y.npy");
  try {
    t.identify(t.target);
    std::cout << "a missing tensor was not noticed\n";
    return 1;
  } catch (const std::exception&) {
  }

  const auto report = moe::storage::test::kill_at_random(t, options);
  const int status = moe::storage::test::print_report(
      "golden case writes", options, report);
  fs::remove_all(root);
  return status;
}
