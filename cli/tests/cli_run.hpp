// Running the built moe-oracle binary from a test: its exit status and everything it printed, or its --json
// output parsed (a test fails when the command fails or prints something that is not JSON).
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace moe::test {

struct Result {
  int status = -1;
  std::string output;  // stdout and stderr
};

// `launcher` goes before the binary: "timeout 60" bounds a run that must not hang (its status is then 124).
inline Result run(const std::string& args, const std::string& launcher = "") {
  const std::string command = (launcher.empty() ? "" : launcher + " ") + MOE_ORACLE_BIN + " " + args + " 2>&1";
  Result result;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer{};
  std::size_t n = 0;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  const int raw = pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

inline nlohmann::json run_json(const std::string& args) {
  const auto r = run(args + " --json");
  EXPECT_EQ(r.status, 0) << r.output;
  return nlohmann::json::parse(r.output);  // throws (and fails the test) when not JSON
}

}  // namespace moe::test
