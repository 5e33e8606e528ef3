#include "cli/check/check_report.hpp"

#include "cli/check/check_coverage.hpp"
#include "cli/report_output.hpp"
#include "cli/text_format.hpp"
#include "formats/config_json.hpp"

#include <cstdio>
#include <iomanip>
#include <memory>
#include <set>
#include <sstream>

namespace moe::cli {
namespace {


std::set<std::string> covered(const std::vector<CheckRun>& runs) {
  std::set<std::string> f;
  for (const CheckRun& r : runs) {
    auto more = features_of(*r.row, r.layout, r.dispatcher);
    if (r.replica_slots == 0) more.erase("replicated hot experts");  // the plan found nothing to replicate
    f.insert(more.begin(), more.end());
  }
  return f;
}

nlohmann::json errors_json(const dist::RankComparison& c) {
  nlohmann::json j;
  for (int q = 0; q < dist::kQuantities; ++q) {
    const auto& err = c.errors[static_cast<size_t>(q)];
    j[std::string(to_string(static_cast<dist::Quantity>(q)))] =
        err.compared ? nlohmann::json(err.max_abs) : nlohmann::json(nullptr);  // null: not measured
  }
  return j;
}

}  // namespace

std::string one_digit(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

// The name a run is filtered and reported by: "tiny-v4 sum b1 [intended] w4 tp1 … alltoall".
std::string run_name(const CheckRow& row, const ParallelLayout& layout, dist::DispatcherKind kind) {
  return row_label(row) + " [" + row.run.semantics.spec() + "] " + layout_name(layout) + " " +
         std::string(to_string(kind));
}

void print_report(const std::vector<CheckRun>& runs, const ReportSettings& o, std::ostream& out) {
  out << "moe-oracle " << MOE_ORACLE_VERSION << " check: " << runs.size() << " runs, backend " << o.backend
      << ", kernels " << o.kernels << ", " << o.dtype << "; each cell: max |parallel − oracle| over every rank and "
      << "element (pass: ≤ " << one_digit(o.atol) << " + " << one_digit(o.rtol) << "·|oracle|); with steps, the maximum over the "
      << "steps\n";
  if (!o.tolerance_given) {
    // The tolerance of each bf16 row that differs from the header's.
    std::set<std::string> said;
    for (const CheckRun& r : runs) {
      if (!r.row->run.bf16_storage) continue;
      const Tolerance t = bf16_row_tolerance(*r.row);
      if (t.atol == o.atol && t.rtol == o.rtol) continue;
      std::ostringstream line;
      line << "note: rows with bf16 storage in " << (bf16_in_double(*r.row) ? "double" : "float")
           << (r.row->run.quant != Quant::none ? " and FP8 dispatch" : "") << " pass at ≤ " << one_digit(t.atol) << " + "
           << one_digit(t.rtol) << "·|oracle| (docs/model.md, \"bf16 storage\")\n";
      if (said.insert(line.str()).second) out << line.str();
    }
  }
  for (const auto& note : o.notes) out << "note: " << note << "\n";
  const CheckRow* last = nullptr;
  std::unique_ptr<TextTable> table;
  std::vector<std::string> header{"layout", "dispatcher"};
  for (int q = 0; q < dist::kQuantities; ++q) header.emplace_back(to_string(static_cast<dist::Quantity>(q)));
  header.emplace_back("seconds");
  header.emplace_back("result");
  // A row with training steps ends with each run's trajectory: the errors of every step.
  const auto print_trajectories = [&](const CheckRow* row) {
    for (const CheckRun& r : runs) {
      if (r.row != row || r.steps.empty()) continue;
      out << "  trajectory " << layout_name(r.layout) << " " << to_string(r.dispatcher) << ":";
      for (size_t i = 0; i < r.steps.size(); ++i) {
        out << (i ? ";" : "") << " step " << i + 1;
        for (int q = 0; q < dist::kQuantities; ++q) {
          const auto& e = r.steps[i].errors[static_cast<size_t>(q)];
          if (e.compared) out << " " << to_string(static_cast<dist::Quantity>(q)) << " " << one_digit(e.max_abs);
        }
        if (!r.steps[i].pass()) out << " FAIL";
      }
      out << "\n";
    }
  };
  for (const CheckRun& r : runs) {
    if (r.row != last) {
      if (table) table->print(out);
      if (last) print_trajectories(last);
      last = r.row;
      out << "\n" << row_label(*r.row) << ": " << r.row->run.describe()
          << (r.row->run.bf16_storage ? bf16_in_double(*r.row) ? " in double" : " in float" : "") << "\n";
      table = std::make_unique<TextTable>(header);
    }
    std::vector<std::string> row{layout_name(r.layout), std::string(to_string(r.dispatcher))};
    for (const auto& e : r.result.errors) row.push_back(e.compared ? one_digit(e.max_abs) : "-");
    row.push_back(trimmed(r.seconds, 2));
    row.emplace_back(r.result.pass() ? "PASS" : "FAIL");
    table->add_row(row);
  }
  if (table) table->print(out);
  if (last) print_trajectories(last);
  int failed = 0;
  for (const CheckRun& r : runs) {
    if (r.result.pass()) continue;
    ++failed;
    out << std::setprecision(17) << "\nFAIL " << row_label(*r.row) << " [" << r.row->run.semantics.spec() << "] "
        << layout_name(r.layout) << " " << to_string(r.dispatcher) << ": first mismatch in " << r.result.first.tensor
        << " on rank " << r.result.first.rank << " at flat index " << r.result.first.index << ": parallel "
        << r.result.first.got << ", oracle " << r.result.first.want << "\n";
  }
  if (o.default_set) {  // say what it covered
    const auto features = covered(runs);
    std::string missing;
    for (const auto& name : all_features())
      if (!features.count(name)) missing += (missing.empty() ? "" : ", ") + name;
    out << "\ncoverage: " << features.size() << " of " << all_features().size() << " features";
    out << (missing.empty() ? " (every option of the oracle, parallel axis, loss mode and modelled deviation)"
                            : "; not run: " + missing)
        << "\n";
  }
  const auto in_process = std::count_if(runs.begin(), runs.end(), [](const CheckRun& r) { return r.in_process; });
  if (in_process > 0)
    out << "note: " << in_process << " of " << runs.size() << " runs need more ranks than the job has; they ran on "
        << "in-process ranks of rank 0, with host collectives (the rest: on the job's ranks)\n";
  out << runs.size() - static_cast<size_t>(failed) << " passed, " << failed << " failed\n";
}

nlohmann::json report_json(const std::vector<CheckRun>& runs, const ReportSettings& o) {
  nlohmann::json out{{"moe_oracle", MOE_ORACLE_VERSION},
                     {"backend", o.backend},
                     {"kernels", o.kernels},
                     {"dtype", o.dtype},
                     {"tolerance", {{"atol", o.atol}, {"rtol", o.rtol}}},
                     {"chosen", o.notes}};
  nlohmann::json j = nlohmann::json::array();
  for (const CheckRun& r : runs) {
    const ModelConfig& m = r.model;
    nlohmann::json e{{"name", run_name(*r.row, r.layout, r.dispatcher)},
                     {"row", row_label(*r.row)},
                     {"model", {{"source", r.row->run.source.source()},
                                {"config", nlohmann::json::parse(formats::config_to_json(m.layer).dump())},
                                {"num_layers", m.num_layers},
                                {"n_hash_layers", m.n_hash_layers},
                                {"vocab", m.vocab},
                                {"seq", r.row->run.seq},
                                {"global_batch", r.row->run.global_batch},
                                {"micro_batch", r.row->run.micro_batch},
                                {"padding", r.row->run.padding},
                                {"scaling", to_string(r.mode)}}},
                     {"semantics", m.semantics().spec()},
                     {"precision", to_string(r.precision)},
                     {"layout", layout_json(r.layout)},
                     {"dispatcher", to_string(r.dispatcher)},
                     {"tolerance", {{"atol", r.tolerance.atol}, {"rtol", r.tolerance.rtol}}},
                     {"replica_slots", r.replica_slots},
                     {"expert_waves", r.row->expert_waves},
                     {"pass", r.result.pass()},
                     {"ranks", r.in_process ? "in-process" : "backend"},
                     {"seconds", r.seconds},
                     {"max_abs", errors_json(r.result)}};
    for (const auto& step : r.steps) e["steps"].push_back(errors_json(step));
    if (!r.result.pass())
      e["first_mismatch"] = {{"tensor", r.result.first.tensor},
                             {"rank", r.result.first.rank},
                             {"index", r.result.first.index},
                             {"parallel", r.result.first.got},
                             {"oracle", r.result.first.want}};
    j.push_back(e);
  }
  out["runs"] = j;
  const auto features = covered(runs);
  out["features_covered"] = std::vector<std::string>(features.begin(), features.end());
  std::vector<std::string> missing;
  for (const auto& name : all_features())
    if (!features.count(name)) missing.push_back(name);
  out["features_not_run"] = missing;
  return out;
}

void write_junit(const std::vector<CheckRun>& runs, const std::string& path) {
  const auto escape = [](const std::string& text) {
    std::string out;
    for (char ch : text) {
      switch (ch) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        default: out += ch;
      }
    }
    return out;
  };
  int failures = 0;
  double seconds = 0;
  for (const CheckRun& r : runs) {
    failures += !r.result.pass();
    seconds += r.seconds;
  }
  std::ostringstream x;
  x << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuite name=\"moe-oracle check\" tests=\"" << runs.size()
    << "\" failures=\"" << failures << "\" errors=\"0\" time=\"" << seconds << "\">\n";
  for (const CheckRun& r : runs) {
    x << "  <testcase classname=\"" << escape(row_label(*r.row) + " [" + r.row->run.semantics.spec() + "]") << "\" name=\""
      << escape(layout_name(r.layout) + " " + std::string(to_string(r.dispatcher))) << "\" time=\"" << r.seconds
      << "\"";
    if (r.result.pass()) {
      x << "/>\n";
      continue;
    }
    std::ostringstream why;
    why << std::setprecision(17) << "first mismatch in " << r.result.first.tensor << " on rank " << r.result.first.rank
        << " at flat index " << r.result.first.index << ": parallel " << r.result.first.got << ", oracle "
        << r.result.first.want;
    x << ">\n    <failure message=\"" << escape(why.str()) << "\"/>\n  </testcase>\n";
  }
  x << "</testsuite>\n";
  write_report_file("--junit", path, x.str());
}

}  // namespace moe::cli
