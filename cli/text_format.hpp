// How the commands print for people: a layout in one line (and as JSON), counts and sizes as text, and columns
// padded into a table.
#pragma once

#include "reference/parallel_layout.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace moe::cli {

// "world 1024 = tp 1 · cp 2 · dp 64 · pp 8 (dense) = etp 1 · ep 64 · edp 2 · pp 8 (expert), order tp-cp-ep-dp-pp"
std::string describe(const ParallelLayout& layout);

// The layout's sizes, derived dp/edp included, for --json output.
nlohmann::json layout_json(const ParallelLayout& layout);

// 1234567 -> "1,234,567"
std::string with_commas(std::int64_t value);
// A count that may be fractional (an expectation): with commas when whole, else trimmed().
std::string count(double value);
// At most `decimals` decimals, trailing zeros dropped: 330.75, 1323, 5.906.
std::string trimmed(double value, int decimals = 3);
// Bytes in MiB, with GiB alongside from 1 GiB up: "330.75 MiB", "6048 MiB (5.906 GiB)".
std::string mib(double bytes);

// Columns padded to their widest cell; the header underlined.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> header);
  void add_row(std::vector<std::string> cells);
  void print(std::ostream& out) const;

 private:
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace moe::cli
