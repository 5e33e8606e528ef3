// Harness `compare_dump`: compare::read_dump and compare::compare_dump on a real dump (the committed float32
// megatron-core dump, world 2, EP 2, with a backward) of which an input replaces dump.json and at most one tensor
// file. Framed input: dump.json's text, then optionally NUL, "rankR/stem", NUL and the file's bytes (written as
// rankR/stem.npy). Without a NUL the whole input is dump.json.
//
// Invariants: only compare::DumpError leaves read_dump and compare_dump (every refusal is one line naming a file);
// a comparison that was made compared `output` on every rank, counted its tensors as forward + backward, and, without
// output.grad, no gradient; a pass holds no non-finite input (a NaN parameter is refused, never judged).
#include "compare/dump_compare.hpp"
#include "fuzz/framed_dump.hpp"

#include <cctype>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;

// The committed dump copied once into the scratch folder; each input's replaced files restored after it.
const fs::path& base_dump() {
  static const fs::path dir = moe::fuzz::scratch_copy(MOE_COMPARE_DUMP_DIR, "dump");
  return dir;
}

// A file of rank0/ or rank1/ with a plain name (letters, digits, '.', '_', '-'; at most 100 characters).
bool plain_path(std::string_view name) {
  bool plain = (name.starts_with("rank0/") || name.starts_with("rank1/")) && name.size() > 6 && name.size() <= 106 &&
               name.find("..") == std::string_view::npos;
  for (size_t i = 6; plain && i < name.size(); ++i)
    plain = std::isalnum(static_cast<unsigned char>(name[i])) || name[i] == '.' || name[i] == '_' || name[i] == '-';
  return plain;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moe;
  const fs::path& dir = base_dump();
  const fuzz::FramedInput applied(dir, "dump.json", fuzz::as_text(data, size), plain_path);
  compare::Comparison c;
  compare::Dump dump;
  try {
    dump = compare::read_dump(dir);
    c = compare::compare_dump(dump);
  } catch (const compare::DumpError& e) {
    if (std::string(e.what()).find('\n') != std::string::npos) fuzz::finding(std::string("a refusal of two lines: ") + e.what());
    return 0;
  }
  bool output = false;
  int gradients = 0;
  for (const auto& t : c.tensors) {
    output = output || t.tensor == "output";
    gradients += t.backward;
  }
  if (!output) fuzz::finding("a comparison without `output`");
  if (c.forward_tensors() + c.backward_tensors() != static_cast<int>(c.tensors.size()))
    fuzz::finding("forward + backward tensors do not add up");
  if (!c.backward && gradients > 0) fuzz::finding("gradients compared in a dump without output.grad");
  return 0;
}
