// The one JSON reader for files from outside: its depth limit, duplicate keys, and what it refuses to open.
#include "reference/tests/expect_error.hpp"
#include "storage/durable_files.hpp"
#include "storage/json_file.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <future>

namespace moe::storage {
namespace {

namespace fs = std::filesystem;

std::string nested(int depth) { return std::string(static_cast<size_t>(depth), '[') + std::string(static_cast<size_t>(depth), ']'); }

TEST(JsonFile, TakesNestingUpToTheLimitAndRefusesOneMore) {
  EXPECT_TRUE(parse_json_text(nested(kMaxJsonDepth), "t").is_array());
  test::expect_error<StorageError>("t: nested deeper than 64", [] { parse_json_text(nested(kMaxJsonDepth + 1), "t"); });
  // Objects count as arrays do, and the value deepest inside is what is measured.
  std::string objects;
  for (int i = 0; i < kMaxJsonDepth; ++i) objects += "{\"a\":";
  test::expect_error<StorageError>("nested deeper", [&] {
    parse_json_text(objects + "[1]" + std::string(kMaxJsonDepth, '}'), "t");
  });
}

TEST(JsonFile, RefusesAHugeNestingWithoutRecursingIntoIt) {
  // 200,000 levels overflowed the stack of every reader that walked or printed the parsed value.
  test::expect_error<StorageError>("nested deeper", [] { parse_json_text(nested(200000), "t"); });
  test::expect_error<StorageError>("nested deeper", [] { parse_json_text(std::string(200000, '['), "t"); });
}

TEST(JsonFile, RefusesAKeyGivenTwiceInOneObject) {
  test::expect_error<StorageError>("key \"a\" appears twice", [] { parse_json_text(R"({"a": 1, "b": 2, "a": 3})", "t"); });
  test::expect_error<StorageError>("key \"x\" appears twice", [] { parse_json_text(R"({"a": {"x": 1, "x": 1}})", "t"); });
  // The same key in two objects, or in an object and the object inside it, is two keys.
  const auto ok = parse_json_text(R"({"a": {"a": 1}, "b": [{"a": 1}, {"a": 2}]})", "t");
  EXPECT_EQ(ok.at("b").at(1).at("a"), 2);
}

// Found by fuzzing compare: a .npy header key holding a newline broke the one-line refusal that quoted it.
TEST(OneLine, WritesControlCharactersAsHex) {
  EXPECT_EQ(one_line("key 'a\nb\x1b[2J' and \x7f"), "key 'a\\x0ab\\x1b[2J' and \\x7f");
  EXPECT_EQ(one_line("plain, ünïcode kept"), "plain, ünïcode kept");
}

// Found by fuzzing compare's dump.json: a number beyond double escaped as the library's out_of_range.
TEST(JsonFile, RefusesANumberBeyondDoubleAsNotValidJson) {
  test::expect_error<StorageError>("cfg.json: not valid JSON (number overflow parsing '1e400')", [] {
    parse_json_text("{\"a\": 1e400}", "cfg.json");
  });
}

TEST(JsonFile, NamesTheSourceAndThePositionOfASyntaxError) {
  test::expect_error<StorageError>("cfg.json: not valid JSON (parse error at line 1, column 6", [] {
    parse_json_text("{\"a\" 1}", "cfg.json");
  });
}

TEST(JsonFile, ReadsRegularFilesOnlyAndBoundsTheirSize) {
  const fs::path dir = fs::temp_directory_path() / "moe_json_file_test";
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_file_synced(dir / "ok.json", R"({"k": [1, 2]})");
  EXPECT_EQ(read_json_file(dir / "ok.json").at("k").at(1), 2);
  test::expect_error<StorageError>("more than the 4 allowed", [&] { read_json_file(dir / "ok.json", 4); });
  const fs::path fifo = dir / "fifo.json";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  auto opened = std::async(std::launch::async, [&] {
    test::expect_error<StorageError>("is not a regular file (it is a FIFO)", [&] { read_json_file(fifo); });
  });
  ASSERT_EQ(opened.wait_for(std::chrono::seconds(5)), std::future_status::ready) << "blocked on a FIFO";
  opened.get();
  test::expect_error<StorageError>("is not a regular file (it is a character device)", [] { read_json_file("/dev/zero"); });
  fs::remove_all(dir);
}

}  // namespace
}  // namespace moe::storage
