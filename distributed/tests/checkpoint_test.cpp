// A checkpoint is untrusted input: checkpoint.json and the piece files may be edited, truncated or malicious. Each
// test breaks one rule and expects a one-line refusal naming the file and the rule. The comment of each says what
// the loader did before the rule existed. Saving replaces a checkpoint folder as a whole, or refuses a folder
// holding anything else (what a kill at a random moment leaves is Checkpoint.KillAtRandom's test).
#include "distributed/tests/checkpoint_fixture.hpp"
#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <limits>

namespace moe::dist {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string read_bytes(const fs::path& f) {
  std::ifstream in(f, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A fresh checkpoint of the small model in a private folder, removed when the test ends.
struct Written {
  explicit Written(const std::string& tag) : dir(fs::temp_directory_path() / ("moe_checkpoint_test_" + tag)) {
    fs::remove_all(dir);
    fs::remove_all(outside());
    fixture.save(dir, 5);
  }
  ~Written() {
    fs::remove_all(dir);
    fs::remove_all(outside());
  }
  Written(const Written&) = delete;
  Written& operator=(const Written&) = delete;

  fs::path outside() const { return dir.string() + "_outside"; }
  json meta() const { return json::parse(std::ifstream(dir / "checkpoint.json")); }
  void write(const json& m) const { std::ofstream(dir / "checkpoint.json") << m.dump(1); }
  // The index in "pieces" of the first piece of `tensor`.
  std::size_t piece(const std::string& tensor) const {
    const json m = meta();
    for (std::size_t i = 0; i < m.at("pieces").size(); ++i)
      if (m["pieces"][i].at("tensor") == tensor) return i;
    ADD_FAILURE() << "no piece of " << tensor;
    return 0;
  }
  fs::path file(std::size_t piece) const { return dir / meta()["pieces"][piece].at("file").get<std::string>(); }
  // Sets element `index` of a piece to `value` and re-records its checksum, so that only the value is wrong.
  void set_value(std::size_t piece, std::size_t index, double value) const {
    const fs::path f = file(piece);
    std::string bytes = read_bytes(f);
    ASSERT_LT(index * 8, bytes.size());
    std::memcpy(bytes.data() + index * 8, &value, 8);
    std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes;
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a, as the writer records it
    for (const char c : bytes) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
    json m = meta();
    m["pieces"][piece]["fnv1a"] = h;
    write(m);
  }
  void load() const { (void)load_checkpoint(dir.string(), fixture.config); }

  dist::test::CheckpointFixture fixture;
  fs::path dir;
};

// The refusal is a std::runtime_error of one line holding `fragment`.
void expect_refused(const Written& w, const std::string& fragment) {
  const std::string what = moe::test::expect_error<std::runtime_error>(fragment, [&] { w.load(); });
  EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
}

// Runs the load on another thread: a loader that blocks on a FIFO is reported, then woken up by opening the FIFO
// for writing, so that the test fails instead of hanging.
void expect_refused_without_hanging(const Written& w, const fs::path& fifo, const std::string& fragment) {
  auto done = std::async(std::launch::async, [&] {
    try {
      w.load();
      return std::string("accepted");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  if (done.wait_for(std::chrono::seconds(5)) == std::future_status::timeout) {
    ADD_FAILURE() << "the loader blocked on the FIFO " << fifo;
    while (done.wait_for(std::chrono::milliseconds(10)) == std::future_status::timeout) {
      const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
      if (fd >= 0) ::close(fd);
    }
  }
  const std::string what = done.get();
  EXPECT_NE(what.find(fragment), std::string::npos) << what;
}

TEST(Checkpoint, TheFixtureLoadsBack) {
  const Written w("fixture");
  EXPECT_TRUE(w.fixture.matches(load_checkpoint(w.dir.string(), w.fixture.config), 5));
}

// Before: "../x" and absolute paths were read wherever they pointed (a valid piece outside loaded fine).
TEST(Checkpoint, PieceFilesMustBePlainNamesInTheFolder) {
  const Written w("confined");
  const std::size_t i = w.piece("head");
  fs::create_directories(w.outside());
  fs::rename(w.file(i), w.outside() / "head.bin");
  json m = w.meta();
  m["pieces"][i]["file"] = "../" + w.outside().filename().string() + "/head.bin";
  w.write(m);
  expect_refused(w, "must be a plain file name in the checkpoint folder");
  m["pieces"][i]["file"] = (w.outside() / "head.bin").string();
  w.write(m);
  expect_refused(w, "must be a plain file name in the checkpoint folder");
  m["pieces"][i]["file"] = "..";
  w.write(m);
  expect_refused(w, "must be a plain file name in the checkpoint folder");
}

// Before: a symlink was followed out of the folder (and loaded), a FIFO hung the loader in open(), a directory
// was reported as a piece with a wrong size.
TEST(Checkpoint, PieceFilesMustBeRegularFiles) {
  const Written w("regular");
  const std::size_t i = w.piece("head");
  const fs::path piece = w.file(i);
  fs::create_directories(w.outside());
  fs::rename(piece, w.outside() / "head.bin");
  fs::create_symlink(w.outside() / "head.bin", piece);
  expect_refused(w, "leaves the checkpoint folder");

  // A symlink that stays inside the folder is followed.
  fs::remove(piece);
  fs::rename(w.outside() / "head.bin", w.dir / "head.data");
  fs::create_symlink("head.data", piece);
  EXPECT_NO_THROW(w.load());

  fs::remove(piece);
  fs::create_directory(piece);
  expect_refused(w, "is not a regular file");
  fs::remove(piece);
  ASSERT_EQ(::mkfifo(piece.c_str(), 0600), 0) << std::strerror(errno);
  expect_refused_without_hanging(w, piece, "is not a regular file");
}

// Before: checkpoint.json as a directory gave "basic_filebuf::underflow error reading the file"; as a FIFO it hung.
TEST(Checkpoint, CheckpointJsonMustBeARegularFile) {
  const Written w("json_kind");
  const fs::path meta = w.dir / "checkpoint.json";
  fs::remove(meta);
  fs::create_directory(meta);
  const std::string what = moe::test::expect_error<std::runtime_error>("is not a regular file", [&] { w.load(); });
  EXPECT_NE(what.find(meta.string()), std::string::npos) << what;
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  fs::remove(meta);
  ASSERT_EQ(::mkfifo(meta.c_str(), 0600), 0) << std::strerror(errno);
  expect_refused_without_hanging(w, meta, "is not a regular file");
}

// Before: r0 + rows overflowed past the bounds check and the piece was written out of bounds; "offset": [0] read
// past the end of the JSON array; shape [-1, -8] on a 64-byte piece threw std::bad_alloc; 1.5 was truncated.
TEST(Checkpoint, OffsetsAndShapesMustFitTheirTensor) {
  const Written w("bounds");
  const std::size_t bias = w.piece("layer1.expert_bias");       // [4, 1]
  const std::size_t router = w.piece("layer1.router_weight");  // [4, 8]
  const json good = w.meta();
  const auto with = [&](std::size_t i, const char* key, const json& value) {
    json m = good;
    m["pieces"][i][key] = value;
    w.write(m);
  };
  with(router, "offset", {std::numeric_limits<std::int64_t>::max(), 0});
  expect_refused(w, "lie outside layer1.router_weight [4, 8]");
  with(router, "offset", {0, std::numeric_limits<std::int64_t>::max()});
  expect_refused(w, "lie outside layer1.router_weight [4, 8]");
  with(router, "offset", {std::numeric_limits<std::uint64_t>::max(), 0});
  expect_refused(w, "lie outside layer1.router_weight [4, 8]");
  with(router, "offset", {1, 0});
  expect_refused(w, "lie outside layer1.router_weight [4, 8]");
  with(router, "offset", {0});
  expect_refused(w, "'offset' must be [row, col], two integers");
  with(router, "offset", {0, 0, 0});
  expect_refused(w, "'offset' must be [row, col], two integers");
  with(router, "offset", {0.5, 0});
  expect_refused(w, "'offset' must be [row, col], two integers");
  with(router, "offset", "0,0");
  expect_refused(w, "'offset' must be [row, col], two integers");
  with(bias, "shape", {-1, -8});
  expect_refused(w, "'shape' must be [rows, cols], two integers");
  with(bias, "shape", {2, 1});
  expect_refused(w, "has 32 bytes, expected 16");
}

// Before: NaN and inf parameters or moments, a negative second moment, an expert bias of inf and tid2eid ids
// outside [0, E) (or not integers, then truncated) were all loaded.
TEST(Checkpoint, ValuesMustBeFiniteAndInRange) {
  const Written w("values");
  const struct {
    std::string tensor;
    std::size_t index;
    double value;
    std::string fragment;
  } cases[] = {
      {"layer1.router_weight", 3, std::nan(""), "element 3 of layer1.router_weight is nan (values must be finite)"},
      {"head.adam_m", 0, std::numeric_limits<double>::infinity(), "element 0 of head.adam_m is inf"},
      {"embedding.adam_v", 2, -1.0, "element 2 of embedding.adam_v is -1, but second moments are >= 0"},
      {"layer1.expert_bias", 1, -std::numeric_limits<double>::infinity(), "element 1 of layer1.expert_bias is -inf"},
      {"layer0.tid2eid", 5, 4.0, "element 5 of layer0.tid2eid is 4, not an expert id in [0, 4)"},
      {"layer0.tid2eid", 6, -1.0, "element 6 of layer0.tid2eid is -1, not an expert id in [0, 4)"},
      {"layer0.tid2eid", 7, 1.5, "element 7 of layer0.tid2eid is 1.5, not an expert id in [0, 4)"},
  };
  for (const auto& c : cases) {
    const json good = w.meta();
    const std::size_t i = w.piece(c.tensor);
    const fs::path f = w.file(i);
    const std::string bytes = read_bytes(f);
    w.set_value(i, c.index, c.value);
    const std::string what = moe::test::expect_error<std::runtime_error>(c.fragment, [&] { w.load(); });
    EXPECT_NE(what.find(f.string()), std::string::npos) << "names the piece file: " << what;
    std::ofstream(f, std::ios::binary | std::ios::trunc) << bytes;
    w.write(good);
  }
  EXPECT_NO_THROW(w.load());
}

// Before: a tid2eid row naming one expert twice (each id in range) was loaded, and `checkpoint verify` called it
// verified; the layer itself refuses such a table. The refusal names the tensor and the row.
TEST(Checkpoint, ATableRowNamesDistinctExperts) {
  const Written w("tid2eid_repeat");
  const std::size_t i = w.piece("layer0.tid2eid");
  ASSERT_EQ(w.meta()["pieces"][i]["shape"], json::array({16, 2}));  // row-major: row 3 is elements 6 and 7
  double first = 0;
  std::memcpy(&first, read_bytes(w.file(i)).data() + 6 * 8, 8);
  w.set_value(i, 7, first);
  expect_refused(w, "tensor layer0.tid2eid: row 3 (token id 3) names expert " +
                        std::to_string(static_cast<int>(first)) + " twice");
}

// Before: 3.7 was truncated to 3, -7 was taken, 1e12 and 2^31 wrapped to some int.
TEST(Checkpoint, StepsMustBeIntegersInRange) {
  const Written w("steps");
  const json good = w.meta();
  for (const char* key : {"training_step", "optimizer_step"}) {
    for (const json& bad : {json(3.7), json(-7), json(1e12), json(std::int64_t{1} << 31), json(5.0), json("5")}) {
      json m = good;
      m[key] = bad;
      w.write(m);
      expect_refused(w, std::string("'") + key + "' must be an integer in [0, 2147483647]");
    }
    json m = good;
    m[key] = 2147483647;
    w.write(m);
    EXPECT_NO_THROW(w.load()) << key;
  }
}

// The structure of checkpoint.json itself: each rule one line naming the file.
TEST(Checkpoint, MalformedMetadataIsOneLineNamingTheFile) {
  const Written w("structure");
  const json good = w.meta();
  const auto expect = [&](const json& m, const std::string& fragment) {
    w.write(m);
    const std::string what = moe::test::expect_error<std::runtime_error>(fragment, [&] { w.load(); });
    EXPECT_NE(what.find((w.dir / "checkpoint.json").string()), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  };
  json m = good;
  m["has_moments"] = 1;
  expect(m, "'has_moments' must be true or false");
  m = good;
  m["pieces"] = json::object();
  expect(m, "'pieces' must be an array");
  m = good;
  m["pieces"][0]["fnv1a"] = -1;
  expect(m, "'fnv1a' must be an unsigned integer");
  m = good;
  m["pieces"][0]["file"] = 7;
  expect(m, "'file' must be a string");
  std::ofstream(w.dir / "checkpoint.json") << "{\"format\": ";
  const std::string what = moe::test::expect_error<std::runtime_error>("invalid JSON", [&] { w.load(); });
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
}

// Leftovers of a write beside `dir`: its staging folder or the old version renamed aside.
std::vector<std::string> beside(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.rfind(dir.filename().string() + ".tmp-", 0) == 0 || name.rfind(dir.filename().string() + ".old-", 0) == 0)
      names.push_back(name);
  }
  return names;
}

// Before: the new pieces were written into the folder in place, over and next to the old ones (a kill in between
// left a checkpoint.json whose checksums no longer matched).
TEST(Checkpoint, SaveReplacesAnOlderCheckpointAsAWhole) {
  const Written w("replace");
  std::ofstream(w.dir / "stale.0_0.bin") << "a piece of an older model";
  w.fixture.save(w.dir, 6);
  EXPECT_TRUE(w.fixture.matches(load_checkpoint(w.dir.string(), w.fixture.config), 6));
  EXPECT_FALSE(fs::exists(w.dir / "stale.0_0.bin")) << "nothing of the old checkpoint survives";
  EXPECT_TRUE(beside(w.dir).empty());
}

// Without RENAME_EXCHANGE, a writer stopped between its two renames leaves no folder and the previous checkpoint
// complete beside it. Before: the load refused ("no checkpoint.json", pointing to the .old- folder) and the folder
// stayed missing; now the loader puts the old version back and loads it.
TEST(Checkpoint, AMissingFolderIsRestoredFromTheOldVersionSetAside) {
  const Written w("aside");
  const fs::path aside = w.dir.string() + ".old-123-4";
  fs::remove_all(aside);
  fs::rename(w.dir, aside);
  EXPECT_TRUE(w.fixture.matches(load_checkpoint(w.dir.string(), w.fixture.config), 5));
  EXPECT_TRUE(beside(w.dir).empty()) << "the old version is back in place, not copied";
}

// Before: the pieces were written into any folder, next to whatever it held.
TEST(Checkpoint, SaveRefusesAFolderHoldingOtherFiles) {
  const Written w("foreign");
  std::ofstream(w.dir / "notes.txt") << "mine\n";
  const std::string what = moe::test::expect_error<std::runtime_error>(
      "refusing to replace " + w.dir.string() + ": it holds 'notes.txt' (a regular file), which is not a file of a "
      "checkpoint", [&] { w.fixture.save(w.dir, 6); });
  EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  EXPECT_TRUE(w.fixture.matches(load_checkpoint(w.dir.string(), w.fixture.config), 5)) << "the old one is intact";
  EXPECT_TRUE(fs::exists(w.dir / "notes.txt"));
  EXPECT_TRUE(beside(w.dir).empty());
}

}  // namespace
}  // namespace moe::dist
