// A scratch copy of a committed megatron-core step dump (moe-step/1) that a test may change, and what the tests
// change it with: step.json, and a tensor file scaled or with one element moved.
#pragma once

#include "compare/step_dump.hpp"
#include "formats/npy.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>

namespace moe::compare::test {

namespace fs = std::filesystem;

class StepDumpCopy : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("moe-step-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::copy(source(), dir_, fs::copy_options::recursive);
  }
  // The committed dump a fixture copies.
  virtual fs::path source() const = 0;
  void TearDown() override { fs::remove_all(dir_); }

  nlohmann::json meta() const { return nlohmann::json::parse(std::ifstream(dir_ / kStepJson)); }
  void write_meta(const nlohmann::json& j) const { std::ofstream(dir_ / kStepJson) << j.dump(2); }
  void scale(const fs::path& file, double factor) const {
    formats::NpyArray a = formats::read_npy(file);
    for (double& v : a.reals) v *= factor;
    formats::write_npy(file, a);
  }
  void add(const fs::path& file, size_t index, double delta) const {
    formats::NpyArray a = formats::read_npy(file);
    a.reals.at(index) += delta;
    formats::write_npy(file, a);
  }
  // Judged at float32's tolerance: Megatron's CE is float32 whatever the model's dtype.
  StepComparison judged() const { return compare_step_dump(read_step_dump(dir_, {"", Precision::float32})); }
  // The one-line message of the DumpError the dump is refused with ("" and a test failure when it is accepted).
  std::string refusal() const {
    try {
      judged();
    } catch (const DumpError& e) {
      return e.what();
    }
    ADD_FAILURE() << "accepted a step dump that should be refused";
    return "";
  }
  fs::path dir_;
};

}  // namespace moe::compare::test
