// Harness `step_dump`: compare::read_step_dump and compare::compare_step_dump on a real step dump (megatron-core
// 0.19.2's training step on 4 ranks, TP 2 with sequence parallelism and EP 2, with its optimizer's end: the grad
// norm and the parameters after the step; compare/tests/data/megatron_step_tp2_ep2) of which an input replaces
// step.json and at most one tensor file. Framed input as compare_dump's: step.json's text, then optionally NUL, a
// path ("inputs/head", "rank2/grad.layer0.expert_fc1.1"), NUL and the file's bytes (written as PATH.npy). Without a
// NUL the whole input is step.json.
//
// Invariants: only compare::DumpError leaves the reader and the comparison (every refusal one line); a comparison
// that was made compared every trained parameter of its model, each on at least one rank, with finite results; with
// an optimizer, every trained parameter after the step too, and with its state both moments of each; a reported grad
// norm judged on every rank and a reported lm loss judged, finitely.
#include "compare/step_dump.hpp"
#include "fuzz/framed_dump.hpp"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;

const fs::path& base_dump() {
  static const fs::path dir = moe::fuzz::scratch_copy(MOE_STEP_DUMP_DIR, "step");
  return dir;
}

// inputs/<name> or rank0/ … rank3/<name>, the name plain (letters, digits, '.', '_', '-'; at most 100 characters).
bool plain_path(std::string_view name) {
  std::size_t at = 0;
  if (name.starts_with("inputs/")) at = 7;
  else if (name.size() > 6 && name.starts_with("rank") && name[4] >= '0' && name[4] <= '3' && name[5] == '/') at = 6;
  else return false;
  if (name.size() <= at || name.size() > at + 100 || name.find("..") != std::string_view::npos) return false;
  for (std::size_t i = at; i < name.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(name[i])) && name[i] != '.' && name[i] != '_' && name[i] != '-')
      return false;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moe;
  const fs::path& dir = base_dump();
  const fuzz::FramedInput applied(dir, compare::kStepJson, fuzz::as_text(data, size), plain_path);
  compare::StepComparison c;
  compare::StepDump dump;
  try {
    dump = compare::read_step_dump(dir, {"", Precision::float32});
    c = compare::compare_step_dump(dump);
  } catch (const compare::DumpError& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) fuzz::finding(std::string("a refusal of two lines: ") + e.what());
    return 0;
  }
  ModelParams<double> params = dump.params;
  if (c.tensors.size() != trained_tensors(dump.model, params).size())
    fuzz::finding("a comparison that left out a trained parameter");
  for (const auto& t : c.tensors) {
    if (t.ranks.empty()) fuzz::finding("a parameter compared on no rank: " + t.stem);
    if (!std::isfinite(t.max_abs) || !std::isfinite(t.worst)) fuzz::finding("a non-finite result for " + t.stem);
  }
  if (dump.optimizer && c.after.size() < c.tensors.size())
    fuzz::finding("an optimizer's step that left out a parameter after it");
  for (const auto& t : c.after)
    if (t.ranks.empty() || std::isnan(t.worst) || !std::isfinite(t.max_abs))
      fuzz::finding("a parameter after the step compared on no rank or to no number: " + t.stem);
  if (dump.optimizer && dump.optimizer->state && c.state.size() != 2 * c.tensors.size())
    fuzz::finding("an optimizer's state that left out a moment");
  for (const auto& t : c.state)
    if (t.ranks.empty() || std::isnan(t.worst) || !std::isfinite(t.max_abs))
      fuzz::finding("a moment compared on no rank or to no number: " + t.stem);
  if (!dump.reported_grad_norm.empty() &&
      (!c.grad_norm || c.grad_norm->got.size() != dump.reported_grad_norm.size() || !std::isfinite(c.grad_norm->worst)))
    fuzz::finding("a reported grad norm not judged on every rank");
  if (dump.reported_lm_loss && (!c.lm_loss || !std::isfinite(c.lm_loss->worst)))
    fuzz::finding("a reported lm loss not judged, or judged to no number");
  return 0;
}
