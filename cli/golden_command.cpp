// `moe-oracle golden verify|write`: golden cases (golden/README.md) against the oracle.
//   verify DIR...  runs the oracle on each case (a DIR holding case.json, or a folder of such DIRs) and prints per
//                  tensor the max abs / max rel error and PASS/FAIL; exit status 0 only if every tensor passes,
//                  1 when one fails, 2 when a case could not be read or run (refused input, not a mismatch).
//                  Layer cases (moe-golden/1, /2) run the layer oracle, model cases (moe-golden-model/1) one
//                  global step; each case says which semantics it ran under.
//   write          writes a new layer case from a config file, seeded inputs and the oracle.
#include "cli/cli_checks.hpp"
#include "cli/commands.hpp"
#include "cli/model_options.hpp"
#include "cli/progress.hpp"
#include "golden/case_compare.hpp"
#include "golden/case_files.hpp"
#include "golden/case_oracle.hpp"
#include "golden/golden_case.hpp"
#include "golden/model_case_oracle.hpp"
#include "storage/json_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace moe::cli {
namespace {

namespace fs = std::filesystem;
using golden::TensorComparison;

struct VerifyOptions {
  std::vector<std::string> paths;
  bool json = false;
};

struct WriteOptions {
  std::string config_file;
  std::string out;
  std::uint64_t seed = 1;
  int seq = 8;
  int batch = 2;
  int vocab = 64;
  bool json = false;
};

// Each path is a case, or a folder whose case subfolders are taken in name order. Either may have been left
// missing by an interrupted write (golden::recover_case_directory): it is put back first, so a path given is not
// required to exist when the command line is parsed.
std::vector<fs::path> case_directories(const std::vector<std::string>& paths) {
  std::vector<fs::path> cases;
  for (const auto& p : paths) {
    if (golden::is_case_directory(p)) {
      cases.emplace_back(p);
      continue;
    }
    if (!fs::is_directory(p)) throw std::invalid_argument(p + ": no such case or folder of cases");
    const std::vector<fs::path> found = golden::case_directories_in(p);
    if (found.empty()) throw std::invalid_argument(p + ": holds no case.json and no case folders");
    cases.insert(cases.end(), found.begin(), found.end());
  }
  return cases;
}

struct CaseResult {
  std::string path;
  std::string kind;       // "layer" or "model" (empty when case.json could not be read)
  std::string semantics;  // the spec the case ran under
  std::string written_by; // the release that wrote it (format 2's written_by; empty: not recorded)
  std::string error;      // reading or running the case failed
  std::vector<TensorComparison> tensors;
  bool pass() const {
    return error.empty() && std::all_of(tensors.begin(), tensors.end(), [](const auto& t) { return t.pass(); });
  }
};

// The kind of case follows from its "format" key.
bool is_model_case(const fs::path& dir) {
  const std::string format = golden::case_format_of(golden::read_case_json(dir), (dir / golden::kCaseJson).string());
  return format.rfind("moe-golden-model/", 0) == 0;
}

CaseResult verify_case(const fs::path& dir) {
  CaseResult r;
  r.path = dir.string();
  try {
    if (is_model_case(dir)) {
      r.kind = "model";
      const golden::ModelCase c = golden::read_model_case(dir);
      r.semantics = c.header.model.semantics().spec();
      std::vector<std::string> names;
      for (const auto& s : golden::model_output_specs(c.header)) names.push_back(s.stem);
      r.tensors = golden::compare_tensors(names, c.tensors,
                                          golden::model_oracle_outputs(c.header, golden::model_oracle_inputs(c)),
                                          c.header.tolerance);
    } else {
      r.kind = "layer";
      const golden::GoldenCase c = golden::read_case(dir);
      r.semantics = c.header.config.semantics.spec();
      r.written_by = c.header.written_by;
      r.tensors = golden::compare_outputs(c, golden::oracle_outputs(c.header.config, golden::oracle_inputs(c)));
    }
  } catch (const fs::filesystem_error& e) {  // a file of the case that cannot be reached (a symlink loop)
    r.error = (e.path1().empty() ? r.path : e.path1().string()) + ": " + e.code().message();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

void print_table(const CaseResult& r) {
  std::cout << "case " << r.path;
  if (!r.kind.empty())
    std::cout << "  (" << r.kind << " case, semantics " << (r.semantics.empty() ? "?" : r.semantics) << ", written by "
              << (r.written_by.empty() ? "a release that did not record itself (before 0.4.0, or the numpy generator)"
                                       : r.written_by)
              << ")";
  std::cout << "\n";
  if (!r.error.empty()) {
    std::cout << "  ERROR " << r.error << "\n";
    return;
  }
  for (const auto& t : r.tensors) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-30s max_abs %10.3e  max_rel %10.3e  %s", t.name.c_str(), t.max_abs,
                  t.max_rel, t.pass() ? "PASS" : "FAIL");
    std::cout << line;
    if (!t.pass()) std::cout << " (" << t.failing << " elements outside tolerance)";
    std::cout << "\n";
  }
  std::cout << "  " << (r.pass() ? "PASS" : "FAIL") << "\n";
}

// max_abs and max_rel are NaN or inf when a computed value is (max_rel also inf when a zero reference was missed);
// JSON has neither, so they appear as null. The table prints them as nan and inf.
nlohmann::json to_json(const CaseResult& r) {
  nlohmann::json j{{"case", r.path}, {"pass", r.pass()}};
  if (!r.kind.empty()) j["kind"] = r.kind;
  j["written_by"] = r.written_by.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.written_by);
  if (!r.semantics.empty()) j["semantics"] = r.semantics;
  if (!r.error.empty()) j["error"] = r.error;
  for (const auto& t : r.tensors) {
    j["tensors"].push_back({{"name", t.name}, {"max_abs", t.max_abs}, {"max_rel", t.max_rel},
                            {"failing", t.failing}, {"pass", t.pass()}});
  }
  return j;
}

void run_verify(const VerifyOptions& opt) {
  std::vector<CaseResult> results;
  const auto dirs = case_directories(opt.paths);
  Progress progress("golden verify", "cases", static_cast<long>(dirs.size()), opt.json);
  for (const auto& dir : dirs) {
    results.push_back(verify_case(dir));
    progress.step();
  }
  const auto passed = std::count_if(results.begin(), results.end(), [](const auto& r) { return r.pass(); });
  if (opt.json) {
    nlohmann::json j{{"moe_oracle", MOE_ORACLE_VERSION},
                     {"cases", nlohmann::json::array()},
                     {"passed", passed},
                     {"total", results.size()}};
    for (const auto& r : results) j["cases"].push_back(to_json(r));
    std::cout << j.dump(2) << "\n";
  } else {
    for (const auto& r : results) print_table(r);
    std::cout << passed << " of " << results.size() << " cases pass\n";
  }
  // A case that could not be read or run is refused input (2, as docs/cli.md says), not a mismatch (1): a NaN
  // tensor or a bad case.json says nothing about the oracle.
  const bool refused = std::any_of(results.begin(), results.end(), [](const auto& r) { return !r.error.empty(); });
  if (refused) throw CLI::RuntimeError(2);
  if (passed != static_cast<std::ptrdiff_t>(results.size())) throw CLI::RuntimeError(1);
}

void run_write(const WriteOptions& opt) {
  nlohmann::json config_json;
  try {  // the shared reader's limits: a regular file, bounded size and depth, no key given twice
    config_json = storage::read_json_file(opt.config_file);
  } catch (const storage::StorageError& e) {
    throw std::invalid_argument(e.what());  // names the file already
  }
  // A case.json (or any {"config": {...}} wrapper) gives its config object; a bare config object is used as is.
  if (config_json.is_object() && config_json.contains("config") && !config_json.contains("hidden"))
    config_json = nlohmann::json(config_json["config"]);
  MoeConfig config;
  try {
    config = formats::config_from_json(config_json);
  } catch (const std::exception& e) {
    throw std::invalid_argument(opt.config_file + ": " + e.what());
  }
  require_fits(layer_memory(config, static_cast<double>(opt.seq) * opt.batch),
               "writing a case of " + opt.config_file, "give smaller --seq / --batch, or a smaller config");
  const std::string description = "written by moe-oracle golden write from " +
                                  fs::path(opt.config_file).filename().string() + ", seed " +
                                  std::to_string(opt.seed);
  golden::GoldenCase written =
      golden::oracle_case(config, opt.seq, opt.batch, opt.vocab, opt.seed, tolerance(Compared::golden_case, Precision::float64), description);
  written.header.written_by = std::string("moe-oracle ") + MOE_ORACLE_VERSION;
  golden::write_case(opt.out, written);
  if (opt.json) {
    std::cout << nlohmann::json{{"wrote", opt.out}, {"description", description}}.dump(2) << "\n";
  } else {
    std::cout << "wrote " << opt.out << "\n";
  }
}

}  // namespace

void add_golden_command(CLI::App& app) {
  auto* golden = app.add_subcommand(
      "golden", "Golden cases (layer cases moe-golden/1 and /2, model cases moe-golden-model/1): verify, write");
  golden->require_subcommand(1);

  auto verify = std::make_shared<VerifyOptions>();
  auto* v = golden->add_subcommand(
      "verify", "Run the oracle on golden cases and compare every output tensor (exit status 0 only if all pass)");
  v->add_option("DIR", verify->paths, "case folders (holding case.json), or folders of case folders")->required();
  v->add_flag("--json", verify->json, "machine-readable output");
  v->callback([verify] { run_verify(*verify); });

  auto write = std::make_shared<WriteOptions>();
  auto* w = golden->add_subcommand(
      "write", "Write a case: seeded inputs (moe::random_params/inputs/grad_y) and the oracle's outputs");
  w->add_option("--config", write->config_file,
                "JSON file holding a layer case's \"config\" object, or a case.json (its \"config\" is taken); "
                "\"semantics\" makes a moe-golden/2 case")
      ->required()
      ->check(CLI::ExistingFile);
  w->add_option("--out", write->out,
                "case folder to create, or to replace as a whole (an existing one may hold only a previous case)")
      ->required();
  w->add_option("--seed", write->seed, "seed of the inputs")->capture_default_str()->check(seed_value());
  w->add_option("--seq", write->seq, "sequence length")->capture_default_str()->check(whole_at_least(1));
  w->add_option("--batch", write->batch, "micro-batch size")->capture_default_str()->check(whole_at_least(1));
  w->add_option("--vocab", write->vocab, "vocabulary size (hash routing's tid2eid rows)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 24));
  w->add_flag("--json", write->json, "machine-readable output");
  w->callback([write] { run_write(*write); });
}

}  // namespace moe::cli
