#include "cli/text_format.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <utility>

namespace moe::cli {

std::string describe(const ParallelLayout& l) {
  std::ostringstream s;
  s << "world " << l.world << " = tp " << l.tp << " · cp " << l.cp << " · dp " << l.dp() << " · pp " << l.pp;
  if (l.gtp > 1) s << " · gtp " << l.gtp;
  s << " (dense) = etp " << l.etp << " · ep " << l.ep << " · edp " << l.edp() << " · pp " << l.pp;
  if (l.egtp > 1) s << " · egtp " << l.egtp;
  s << " (expert), order " << l.order;
  if (l.gtp > 1 || l.egtp > 1) s << " (dense " << l.dense_order() << ", expert " << l.expert_order() << ")";
  if (l.vpp > 1) s << ", " << l.vpp << " virtual stages per pp rank";
  return s.str();
}

nlohmann::json layout_json(const ParallelLayout& l) {
  return {{"world", l.world}, {"tp", l.tp},   {"cp", l.cp},     {"pp", l.pp},   {"ep", l.ep},      {"etp", l.etp},
          {"dp", l.dp()},     {"edp", l.edp()}, {"gtp", l.gtp}, {"egtp", l.egtp}, {"vpp", l.vpp},
          {"order", l.order}};
}

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value < 0 ? -value : value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return value < 0 ? "-" + digits : digits;
}

std::string count(double value) {
  const double whole = std::round(value);
  return whole == value ? with_commas(static_cast<std::int64_t>(whole)) : trimmed(value);
}

std::string trimmed(double value, int decimals) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(decimals) << value;
  std::string text = s.str();
  if (text.find('.') != std::string::npos) {
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
  }
  return text;
}

std::string mib(double bytes) {
  constexpr double MiB = 1024.0 * 1024.0;
  std::string text = trimmed(bytes / MiB) + " MiB";
  if (bytes >= 1024 * MiB) text += " (" + trimmed(bytes / (1024 * MiB)) + " GiB)";
  return text;
}

TextTable::TextTable(std::vector<std::string> header) { rows_.push_back(std::move(header)); }

void TextTable::add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

void TextTable::print(std::ostream& out) const {
  // Widths in code points, so that "·" and "…" count as one column.
  const auto width = [](const std::string& s) {
    return static_cast<std::size_t>(std::count_if(s.begin(), s.end(), [](char c) { return (c & 0xC0) != 0x80; }));
  };
  std::vector<std::size_t> widths;
  for (const auto& row : rows_) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], width(row[i]));
  }
  const auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - width(row[i]) + 2, ' ');
    }
    out << line << "\n";
  };
  print_row(rows_.front());
  std::string rule;
  for (std::size_t i = 0; i < widths.size(); ++i) rule += std::string(widths[i], '-') + (i + 1 < widths.size() ? "  " : "");
  out << rule << "\n";
  for (std::size_t r = 1; r < rows_.size(); ++r) print_row(rows_[r]);
}

}  // namespace moe::cli
