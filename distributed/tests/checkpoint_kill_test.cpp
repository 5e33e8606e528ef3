// ctest Checkpoint.KillAtRandom[RenameAside]: a checkpoint written over an existing one at the same path by a child
// process killed at a random moment (storage/tests/kill_harness.hpp) leaves the complete old checkpoint or the
// complete new one: it loads, its checksums verify, and its every value is one version's.
// Usage: checkpoint_kill_test [ITERATIONS [SEED]] [--rename-aside] [--widen-us N] [--dir PATH]  (kill_harness.hpp)
#include "distributed/tests/checkpoint_fixture.hpp"
#include "storage/tests/kill_harness.hpp"

#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using moe::storage::test::Version;
  const auto options = moe::storage::test::parse_kill_options(argc, argv);

  const fs::path root = options.dir / ("moe_checkpoint_kill_test_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const moe::dist::test::CheckpointFixture fixture;
  fixture.save(root / "pristine", 1);
  moe::storage::test::KillTarget t;
  t.target = root / "area" / "checkpoint";
  t.restore_old = [&] {
    fs::remove_all(t.target);
    fs::create_directories(t.target.parent_path());
    fs::copy(root / "pristine", t.target, fs::copy_options::recursive);
  };
  t.write_new = [&] { fixture.save(t.target, 2); };
  t.identify = [&](const fs::path& dir) {
    const moe::dist::TrainingState state = moe::dist::load_checkpoint(dir.string(), fixture.config);
    if (fixture.matches(state, 1)) return Version::old_version;
    if (fixture.matches(state, 2)) return Version::new_version;
    throw std::runtime_error(dir.string() + " loads, but holds neither version");
  };

  // The check can fail: a piece cut short is not a version.
  t.restore_old();
  for (const auto& e : fs::directory_iterator(t.target))
    if (e.path().extension() == ".bin") {
      fs::resize_file(e.path(), fs::file_size(e.path()) - 8);
      break;
    }
  try {
    t.identify(t.target);
    std::cout << "a truncated piece was not noticed\n";
    return 1;
  } catch (const std::exception&) {
  }

  const auto report = moe::storage::test::kill_at_random(t, options);
  const int status = moe::storage::test::print_report(
      "checkpoint writes", options, report);
  fs::remove_all(root);
  return status;
}
