// A golden layer case on disk (golden/README.md): a directory with case.json and one .npy per tensor, where the set
// of tensors, their dtypes and shapes follow from the config and shape (and, in format 2, whether the optional
// padding_mask is there). Reading checks all of it: a missing or extra tensor, a stray file, a wrong dtype or shape
// is a CaseFormatError naming the tensor.
#pragma once

#include "formats/npy.hpp"
#include "golden/case_json.hpp"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace moe::golden {

struct GoldenCase {
  CaseHeader header;
  std::map<std::string, formats::NpyArray> tensors;  // name (file stem) -> array
};

// The input tensors of the layer (x, ids, parameters, grad_y) and the expected outputs, as the config selects
// them; the header's version adds padding_mask when the case has one. Together they are exactly the tensors a case
// holds.
std::vector<std::string> input_tensor_names(const MoeConfig& config);
std::vector<std::string> input_tensor_names(const CaseHeader& header);
std::vector<std::string> output_tensor_names(const MoeConfig& config);

// Throws CaseFormatError when `name` does not have the dtype and shape the format (README.md) gives it for this case.
void check_tensor(const CaseHeader& header, const std::string& name, const formats::NpyArray& array);

GoldenCase read_case(const std::filesystem::path& directory);
// Creates or replaces the directory as a whole (write_case_directory: a crash leaves the old case or the new one);
// refuses one that holds anything but a previous case's files, and a case with a NaN or ±inf anywhere.
void write_case(const std::filesystem::path& directory, const GoldenCase& golden_case);

// True when the directory holds a case.json (for `verify` given a folder of cases), once an interrupted write of it
// is recovered (recover_case_directory).
bool is_case_directory(const std::filesystem::path& directory);

}  // namespace moe::golden
