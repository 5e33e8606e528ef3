// The .npy reader/writer: round trips of the three dtypes, a file numpy wrote, and one test per kind of corrupt
// or unsupported input, each checking that the message names the problem.
#include "formats/npy.hpp"
#include "reference/tests/expect_error.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace moe::formats {
namespace {

// A .npy image with a hand-written header (padded to 64 bytes like numpy) and raw data bytes.
std::string npy_image(const std::string& header_dict, const std::string& data, char major = 1, char minor = 0) {
  std::string header = header_dict;
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += major;
  out += minor;
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  return out + header + data;
}

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string eight_bytes(int n) { return std::string(static_cast<std::size_t>(8 * n), '\0'); }

void expect_rejected(const std::string& bytes, const std::string& fragment) {
  const std::string what = test::expect_error<NpyError>(fragment, [&] { parse_npy(bytes, "test.npy"); });
  if (!what.empty()) {
    EXPECT_NE(what.find("test.npy"), std::string::npos) << "the message names the file";
  }
}

TEST(Npy, RoundTripsReals) {
  const auto a = NpyArray::of_reals({2, 3}, {1.5, -2.0, 0.0, 1e-300, 3.25, -0.0});
  const auto b = parse_npy(serialize_npy(a), "mem");
  EXPECT_EQ(b.dtype, NpyDtype::f8);
  EXPECT_EQ(b.shape, a.shape);
  EXPECT_EQ(b.reals, a.reals);
}

TEST(Npy, RoundTripsIntegersBooleansScalarsAndEmpty) {
  const auto i = parse_npy(serialize_npy(NpyArray::of_integers({4}, {0, -1, 1LL << 40, 7})), "mem");
  EXPECT_EQ(i.dtype, NpyDtype::i8);
  EXPECT_EQ(i.integers, (std::vector<std::int64_t>{0, -1, 1LL << 40, 7}));
  const auto b = parse_npy(serialize_npy(NpyArray::of_booleans({2, 2}, {1, 0, 0, 1})), "mem");
  EXPECT_EQ(b.dtype, NpyDtype::b1);
  EXPECT_EQ(b.booleans, (std::vector<std::uint8_t>{1, 0, 0, 1}));
  const auto s = parse_npy(serialize_npy(NpyArray::of_reals({}, {0.125})), "mem");
  EXPECT_TRUE(s.shape.empty());
  EXPECT_EQ(s.reals, std::vector<double>{0.125});
  const auto e = parse_npy(serialize_npy(NpyArray::of_reals({0, 3}, {})), "mem");
  EXPECT_EQ(e.shape, (std::vector<std::int64_t>{0, 3}));
  EXPECT_TRUE(e.reals.empty());
  // Empty arrays of every dtype, through the strict and the widened reader: an empty vector's data() may be null,
  // and memcpy from or to null is undefined even for 0 bytes (this test runs clean under -fsanitize=undefined).
  const auto ei = parse_npy(serialize_npy(NpyArray::of_integers({0}, {})), "mem");
  EXPECT_EQ(ei.shape, (std::vector<std::int64_t>{0}));
  EXPECT_TRUE(ei.integers.empty());
  const auto eb = parse_npy(serialize_npy(NpyArray::of_booleans({2, 0}, {})), "mem");
  EXPECT_TRUE(eb.booleans.empty());
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "moe_npy_test_empty";
  std::filesystem::create_directories(dir);
  for (const char* descr : {"<f8", "<i8", "|b1", "<f4", "<i4", "<u2"}) {
    const auto file = dir / "empty.npy";
    write_bytes(file,
                npy_image(std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (0, 4), }", ""));
    const auto w = read_npy_widened(file);
    EXPECT_EQ(w.size(), 0) << descr;
    EXPECT_TRUE(w.as_doubles().empty()) << descr;
  }
  std::filesystem::remove_all(dir);
}

TEST(Npy, WritesNumpysHeaderLayout) {
  const std::string bytes = serialize_npy(NpyArray::of_reals({3}, {1, 2, 3}));
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const std::size_t header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u) << "data starts 64-byte aligned";
  const std::string dict = "{'descr': '<f8', 'fortran_order': False, 'shape': (3,), }";
  EXPECT_EQ(bytes.substr(10, dict.size()), dict);
  EXPECT_EQ(bytes[10 + header_len - 1], '\n');
}

TEST(Npy, ReadsWhatNumpyWrote) {
  const std::filesystem::path dir = std::filesystem::path(GOLDEN_CASES_DIR) / "softmax_post";
  const auto map = read_npy(dir / "routing_map.npy");
  EXPECT_EQ(map.dtype, NpyDtype::b1);
  ASSERT_EQ(map.shape.size(), 2u);
  std::int64_t selected = 0;
  for (const auto b : map.booleans) selected += b;
  EXPECT_EQ(selected, map.shape[0] * 2) << "top-2 per token, no dropping";
  const auto counts = read_npy(dir / "tokens_per_expert.npy");
  EXPECT_EQ(counts.dtype, NpyDtype::i8);
  const auto y = read_npy(dir / "y.npy");
  EXPECT_EQ(y.dtype, NpyDtype::f8);
  EXPECT_EQ(y.size(), map.shape[0] * 8);
}

TEST(Npy, AcceptsDoubleQuotesAndAnyKeyOrder) {
  const auto a = parse_npy(npy_image("{\"shape\": (1, 2), \"fortran_order\": False, \"descr\": \"<i8\"}",
                                     eight_bytes(2)), "mem");
  EXPECT_EQ(a.dtype, NpyDtype::i8);
  EXPECT_EQ(a.shape, (std::vector<std::int64_t>{1, 2}));
}

TEST(Npy, RejectsBadMagic) {
  std::string bytes = npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", eight_bytes(1));
  bytes[1] = 'X';
  expect_rejected(bytes, "bad magic");
  expect_rejected("PK\x03\x04", "bad magic");
}

TEST(Npy, RejectsNewerFormatVersion) {
  expect_rejected(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", eight_bytes(1), 2, 0),
                  "format version 2.0 is newer than the supported version 1.0");
  expect_rejected(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", eight_bytes(1), 3, 0),
                  "version 3.0");
}

TEST(Npy, RejectsOtherDtypes) {
  for (const std::string descr : {"<f4", ">f8", "<i4", "|u1", "<c16", "|O"}) {
    expect_rejected(npy_image("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (1,), }", eight_bytes(1)),
                    "dtype '" + descr + "'");
  }
}

TEST(Npy, RejectsFortranOrder) {
  expect_rejected(npy_image("{'descr': '<f8', 'fortran_order': True, 'shape': (2, 2), }", eight_bytes(4)),
                  "fortran_order is True");
}

TEST(Npy, RejectsTruncatedData) {
  expect_rejected(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", eight_bytes(5)),
                  "truncated: the data has 40 bytes, shape [2, 3] of <f8 needs 48");
}

TEST(Npy, RejectsTruncatedHeaderAndPreamble) {
  const std::string full = npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", eight_bytes(1));
  expect_rejected(full.substr(0, 30), "truncated in the header");
  expect_rejected(full.substr(0, 8), "truncated in the preamble");
}

TEST(Npy, RejectsBytesAfterTheData) {
  expect_rejected(npy_image("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", eight_bytes(2)),
                  "8 bytes after the data");
}

TEST(Npy, RejectsBooleansOtherThanZeroOrOne) {
  expect_rejected(npy_image("{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", std::string("\x01\x02\x00", 3)),
                  "boolean element 1 is neither 0 nor 1");
}

TEST(Npy, RejectsMalformedHeaders) {
  expect_rejected(npy_image("{'descr': '<f8', 'fortran_order': False, }", ""), "header has no 'shape'");
  expect_rejected(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), 'extra': 1}", eight_bytes(1)),
                  "unknown header key 'extra'");
  expect_rejected(npy_image("{'descr': '<f8', 'fortran_order': False, 'shape': (-1,), }", eight_bytes(1)),
                  "shape must be a tuple of non-negative integers");
  expect_rejected(npy_image("{'descr': '<f8', 'fortran_order': 0, 'shape': (1,), }", eight_bytes(1)),
                  "fortran_order must be True or False");
}

TEST(Npy, FileErrorsNameThePath) {
  const auto path = std::filesystem::temp_directory_path() / "moe_golden_npy_test_missing.npy";
  std::filesystem::remove(path);
  test::expect_error<NpyError>("cannot open", [&] { read_npy(path); });
}

// Only a regular file is read: a FIFO would block the read until a writer came (it hung), a directory or a device
// is no array.
TEST(Npy, OnlyARegularFileIsRead) {
  const auto fifo = std::filesystem::temp_directory_path() / ("moe_golden_npy_test_fifo_" + std::to_string(::getpid()));
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  test::expect_error<NpyError>("is not a regular file (it is a FIFO)", [&] { read_npy(fifo); });
  test::expect_error<NpyError>("is not a regular file (it is a FIFO)", [&] { read_npy_widened(fifo); });
  test::expect_error<NpyError>("is not a regular file (it is a FIFO)", [&] { read_npy_header_widened(fifo); });
  std::filesystem::remove(fifo);
  test::expect_error<NpyError>("is not a regular file", [] { read_npy("/dev/zero"); });
}

}  // namespace
}  // namespace moe::formats
