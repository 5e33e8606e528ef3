// `moe-oracle checkpoint verify DIR` on a checkpoint that `check --steps 2 --resume-as` wrote: exit 0 with a
// summary; a piece cut short, a NaN under a matching checksum, a missing piece, an unlisted file, a folder that is
// not a checkpoint: exit 2 with one line naming the file and the rule; a locked set-aside version beside a missing
// checkpoint: exit 2 after a bounded wait, naming who holds it; a declared model beyond the memory budget: exit 2
// before anything is allocated.
#include "cli/tests/cli_run.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>

namespace moe::test {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One checkpoint for every test of this file, copied per test; in a folder of this process's own (ctest runs each
// test of the file as its own process, side by side).
struct Scratch {
  fs::path root = fs::temp_directory_path() / ("moe_checkpoint_cli_test." + std::to_string(::getpid()));
  ~Scratch() { fs::remove_all(root); }
};

const fs::path& written() {
  static const Scratch scratch;
  static const fs::path dir = [] {
    const fs::path d = scratch.root / "written";
    fs::remove_all(d.parent_path());
    const Result r = run("check --steps 2 --world 2 --ep 2 --dispatcher flex --resume-as world=2 --checkpoint-dir " + d.string());
    EXPECT_EQ(r.status, 0) << r.output;
    return d;
  }();
  return dir;
}

fs::path copy_of(const std::string& name) {
  const fs::path to = written().parent_path() / name;
  fs::remove_all(to);
  fs::copy(written(), to, fs::copy_options::recursive);
  return to;
}

void expect_refused(const fs::path& dir, const std::string& fragment) {
  const Result r = run("checkpoint verify " + dir.string());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(fragment), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
}

json meta_of(const fs::path& dir) { return json::parse(std::ifstream(dir / "checkpoint.json")); }

TEST(CheckpointVerify, AGoodCheckpointPassesWithASummary) {
  const Result r = run("checkpoint verify " + written().string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find(": verified"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tensors exactly once"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("training step 1"), std::string::npos) << r.output;
  const json j = run_json("checkpoint verify " + written().string());
  EXPECT_EQ(j["verified"], true);
  EXPECT_EQ(j["pieces"], meta_of(written())["pieces"].size());
  EXPECT_EQ(run("checkpoint verify --help").status, 0);
}

// The checkpoint records its model by the golden config's keys (reference/config_fields.hpp), which the verifier
// reads with the golden reader: a layer without a balance loss is written as aux_loss_type null, as that reader
// takes it (it was written "none", and verify refused the checkpoint of such a model).
TEST(CheckpointVerify, AModelWithoutABalanceLossIsRead) {
  const fs::path d = written().parent_path() / "no-aux";
  fs::remove_all(d);
  const Result r = run("check --steps 2 --world 2 --ep 2 --dispatcher flex --moe-router-load-balancing-type none "
                       "--resume-as world=2 --checkpoint-dir " + d.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_TRUE(meta_of(d)["model"]["aux_loss_type"].is_null());
  const Result verified = run("checkpoint verify " + d.string());
  EXPECT_EQ(verified.status, 0) << verified.output;
}

TEST(CheckpointVerify, EachBrokenPieceIsNamed) {
  const json meta = meta_of(written());
  const std::string first = meta["pieces"][0]["file"];

  fs::path dir = copy_of("short");
  fs::resize_file(dir / first, fs::file_size(dir / first) - 8);
  expect_refused(dir, (dir / first).string() + ": has ");

  dir = copy_of("missing");
  fs::remove(dir / first);
  expect_refused(dir, (dir / first).string() + ": missing");

  // A NaN whose checksum was updated too: only the check of the values finds it.
  dir = copy_of("nan");
  std::string bytes;
  {
    std::ifstream in(dir / first, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::memcpy(bytes.data(), &nan, sizeof nan);
  std::ofstream(dir / first, std::ios::binary) << bytes;
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a, as checkpoint.cpp
  for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  json m = meta;
  m["pieces"][0]["fnv1a"] = h;
  std::ofstream(dir / "checkpoint.json") << m.dump();
  expect_refused(dir, "element 0 of " + meta["pieces"][0]["tensor"].get<std::string>() + " is nan");

  dir = copy_of("unlisted");
  std::ofstream(dir / "extra.bin") << "x";
  expect_refused(dir, (dir / "extra.bin").string() + ": not a piece listed in checkpoint.json");

  dir = copy_of("not_a_checkpoint");
  fs::remove(dir / "checkpoint.json");
  expect_refused(dir, "checkpoint.json");
}

// Strings of checkpoint.json quoted in a refusal (the format, a tensor's name, a key of the model) carry their control
// characters escaped as \xNN. Before: printed raw, so that an escape sequence reached the terminal and a newline
// forged a second line of output.
TEST(CheckpointVerify, ControlCharactersFromTheFileArePrintedEscaped) {
  const std::string hostile = "x\x1b[2J\nmoe-oracle: verified\r";
  const json meta = meta_of(written());
  const auto expect_escaped = [&](const std::string& name, json m) {
    const fs::path dir = copy_of(name);
    std::ofstream(dir / "checkpoint.json") << m.dump();
    const Result r = run("checkpoint verify " + dir.string());
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("x\\x1b[2J\\x0amoe-oracle: verified\\x0d"), std::string::npos) << name << ": " << r.output;
    EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << name << ": " << r.output;
    EXPECT_EQ(r.output.find('\r'), std::string::npos) << name << ": " << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << name << ": one line: " << r.output;
  };
  json m = meta;
  m["format"] = hostile;
  expect_escaped("control_format", m);
  m = meta;
  m["pieces"][0]["tensor"] = hostile;
  expect_escaped("control_tensor", m);
  m = meta;
  m["model"][hostile] = 1;
  expect_escaped("control_model_key", m);
}

// A checkpoint missing, its previous version set aside at .old- and locked: a writer stopped between its two renames,
// or any process holding that folder. Before: verify waited for the lock forever, printing nothing. Now it gives up
// after a few seconds, naming the folder and the process that holds it, and touches nothing; once the lock is gone
// the next verify puts the checkpoint back, as the loader does.
TEST(CheckpointVerify, ALockedOldVersionBesideAMissingCheckpointIsNamedNotWaitedFor) {
  const fs::path dir = copy_of("locked");
  fs::path aside = dir;
  aside += ".old-4242-0";
  fs::rename(dir, aside);
  const int fd = ::open(aside.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  const Result r = run("checkpoint verify " + dir.string(), "timeout 60");
  ::close(fd);
  EXPECT_EQ(r.status, 2) << "(124: it waited past the test's own limit)\n" << r.output;
  const std::string holder = "process " + std::to_string(::getpid());
  for (const std::string& fragment :
       {dir.string() + " is missing", aside.string(), holder, std::string("still holds locked after 5 s")})
    EXPECT_NE(r.output.find(fragment), std::string::npos) << fragment << "\n" << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  EXPECT_FALSE(fs::exists(dir)) << "nothing restored under another's lock";

  const Result after = run("checkpoint verify " + dir.string());
  EXPECT_EQ(after.status, 0) << after.output;
  EXPECT_FALSE(fs::exists(aside));
}

// Issue 55: verify allocated whatever model checkpoint.json declared (std::bad_alloc for 2^62 elements, or all
// memory for a model just below what the allocator refuses). The load is estimated from the declared model first
// and refused under the one budget, in one line naming the estimate and the budget, before anything is allocated.
TEST(CheckpointVerify, ADeclaredModelBeyondTheMemoryBudgetIsRefusedBeforeAllocating) {
  const fs::path& good = written();  // written without the budget below
  ::setenv("MOE_ORACLE_MEMORY_BUDGET", "100000000", 1);
  const auto refused = [](const fs::path& dir, const std::string& estimate) {
    const Result r = run("checkpoint verify " + dir.string(), "timeout 60");
    EXPECT_EQ(r.status, 2) << r.output;
    for (const std::string& fragment : {(dir / "checkpoint.json").string() + ": loading its model: " + estimate,
                                        std::string("more than the memory budget of 100000000 bytes"),
                                        std::string("MOE_ORACLE_MEMORY_BUDGET")})
      EXPECT_NE(r.output.find(fragment), std::string::npos) << fragment << "\n" << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
  };
  // 2^20 · 2^20 · 2^14 experts · 3 · 256 layers: 3 · 2^62 elements, past any count of bytes.
  fs::path dir = copy_of("huge");
  json meta = meta_of(dir);
  meta["model"]["hidden"] = meta["model"]["ffn_hidden"] = 1 << 20;
  meta["model"]["shared_expert_ffn_hidden"] = 0;
  meta["model"]["num_experts"] = 1 << 14;
  meta["model"]["num_layers"] = 256;
  std::ofstream(dir / "checkpoint.json") << meta.dump();
  refused(dir, "needs more than 2^64 bytes");
  // A vocabulary of 2^16: about 0.3 GB with the moments, which the allocator would have given.
  dir = copy_of("large");
  meta = meta_of(dir);
  meta["model"]["vocab"] = 1 << 16;
  std::ofstream(dir / "checkpoint.json") << meta.dump();
  refused(dir, "needs about ");
  // The written checkpoint (~8 MB to load) fits the same budget.
  const Result fits = run("checkpoint verify " + good.string());
  ::unsetenv("MOE_ORACLE_MEMORY_BUDGET");
  EXPECT_EQ(fits.status, 0) << fits.output;
}

}  // namespace
}  // namespace moe::test
