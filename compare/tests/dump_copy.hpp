// A scratch copy of the committed float32 megatron-core dump (world 2, EP 2, with a backward) that a test may
// change, and what the tests change it with: dump.json, tensors read widened and written back as float32.
#pragma once

#include "compare/dump_compare.hpp"
#include "formats/npy.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace moe::compare::test {

namespace fs = std::filesystem;
inline const fs::path kMegatronDump = fs::path(COMPARE_DATA_DIR) / "megatron_ep2_float32";
inline const char* const kRanks[] = {"rank0", "rank1"};

class DumpCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("moe-compare-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::copy(source(), dir_, fs::copy_options::recursive);
  }
  // The committed dump a fixture copies.
  virtual fs::path source() const { return kMegatronDump; }
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json meta() const { return nlohmann::json::parse(std::ifstream(dir_ / "dump.json")); }
  void write_meta(const nlohmann::json& j) const { std::ofstream(dir_ / "dump.json") << j.dump(2); }
  formats::NpyArray read(const std::string& rank_file) const { return formats::read_npy_widened(dir_ / rank_file); }
  // Written as float32, each value rounded to float (the dump's dtype).
  void write(const std::string& rank_file, formats::NpyArray a) const {
    if (a.dtype == formats::NpyDtype::f8) a.dtype = formats::NpyDtype::f4;
    for (double& v : a.reals) v = static_cast<float>(v);
    formats::write_npy(dir_ / rank_file, a);
  }
  void set_element(const std::string& rank_file, size_t i, double v) const {
    auto a = read(rank_file);
    a.reals[i] = v;
    write(rank_file, a);
  }
  void remove_everywhere(const std::string& name) const {
    for (const char* r : kRanks) fs::remove(dir_ / r / (name + ".npy"));
  }
  void remove_gradients() const {
    for (const char* r : kRanks)
      for (const auto& e : fs::directory_iterator(dir_ / r))
        if (e.path().stem().string().ends_with(".grad")) fs::remove(e.path());
  }

  // The one-line message of the DumpError the dump is refused with ("" and a test failure when it is accepted).
  std::string refusal(const ReadOptions& options = {}) const {
    try {
      compare_dump(read_dump(dir_, options));
    } catch (const DumpError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      return what;
    }
    ADD_FAILURE() << "accepted a dump that should be refused";
    return "";
  }
  void expect_refused(const std::string& fragment, const ReadOptions& options = {}) const {
    const std::string what = refusal(options);
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }

  fs::path dir_;
};

}  // namespace moe::compare::test
