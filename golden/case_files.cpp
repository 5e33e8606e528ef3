#include "golden/case_files.hpp"

#include "storage/durable_files.hpp"
#include "storage/json_file.hpp"
#include "storage/staged_directory.hpp"
#include "storage/write_leftovers.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace moe::golden {
namespace {

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    s += (i ? ", " : "") + (shape[i] == kAnyRows ? std::string("V") : std::to_string(shape[i]));
  }
  return s + "]";
}

}  // namespace

void recover_case_directory(const std::filesystem::path& directory) {
  try {
    storage::StagedDirectory::recover(directory);
  } catch (const storage::StorageError& e) {
    throw CaseFormatError(e.what());  // names the folder and where the previous case is
  }
}

std::vector<std::filesystem::path> case_directories_in(const std::filesystem::path& folder) {
  std::set<std::string> written;  // the cases whose writes left something beside them
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    if (std::string target = storage::leftover_target(entry.path().filename().string()); !target.empty())
      written.insert(std::move(target));
  for (const std::string& name : written) recover_case_directory(folder / name);
  std::vector<std::filesystem::path> cases;
  for (const auto& entry : std::filesystem::directory_iterator(folder)) {
    const std::string name = entry.path().filename().string();
    if (storage::leftover_target(name).empty() && std::filesystem::is_regular_file(entry.path() / kCaseJson))
      cases.push_back(entry.path());
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

nlohmann::json read_case_json(const std::filesystem::path& directory) {
  recover_case_directory(directory);
  const auto json_path = directory / kCaseJson;
  if (!std::filesystem::is_regular_file(json_path)) {
    throw CaseFormatError(directory.string() + ": not a golden case (no " + kCaseJson + ")");
  }
  try {  // the shared reader's limits: bounded size and depth, no key given twice
    return storage::read_json_file(json_path);
  } catch (const storage::StorageError& e) {
    throw CaseFormatError(e.what());  // names the file already
  }
}

std::map<std::string, formats::NpyArray> read_case_tensors(
    const std::filesystem::path& directory, const std::set<std::string>& expected,
    const std::function<void(const std::string& name, const formats::NpyArray& array)>& check) {
  std::map<std::string, formats::NpyArray> tensors;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    const auto file = entry.path().filename();
    if (file == kCaseJson) continue;
    const std::string stem = file.stem().string();
    if (file.extension() != ".npy" || !entry.is_regular_file()) {
      throw CaseFormatError(directory.string() + ": unexpected file '" + file.string() + "' in a case");
    }
    if (!expected.count(stem)) {
      throw CaseFormatError(directory.string() + ": extra tensor '" + stem + "' (not part of a case with this config)");
    }
    formats::NpyArray array = formats::read_npy(entry.path());
    try {
      check(stem, array);
      check_finite(stem, array);
    } catch (const CaseFormatError& e) {
      throw CaseFormatError(directory.string() + ": " + e.what());
    }
    tensors.emplace(stem, std::move(array));
  }
  for (const auto& name : expected) {
    if (!tensors.count(name)) {
      throw CaseFormatError(directory.string() + ": missing tensor '" + name + "' (" + name + ".npy)");
    }
  }
  return tensors;
}

void check_finite(const std::string& name, const formats::NpyArray& array, const std::string& what) {
  for (std::size_t i = 0; i < array.reals.size(); ++i) {
    const double v = array.reals[i];
    if (std::isfinite(v)) continue;
    // The index as numpy prints it too: [row, col] of the C-order element i.
    std::string index = "[";
    std::size_t rest = i;
    std::vector<std::size_t> digits(array.shape.size());
    for (std::size_t d = array.shape.size(); d-- > 0;) {
      const auto extent = static_cast<std::size_t>(array.shape[d]);
      digits[d] = rest % extent;
      rest /= extent;
    }
    for (std::size_t d = 0; d < digits.size(); ++d) index += (d ? ", " : "") + std::to_string(digits[d]);
    throw CaseFormatError(what + " '" + name + "' has a non-finite value " +
                          (std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf") + " at index " + std::to_string(i) + " " +
                          index + "]");
  }
}

void check_dtype_and_shape(const std::string& name, const formats::NpyArray& array, formats::NpyDtype dtype,
                           const std::vector<std::int64_t>& shape) {
  if (array.dtype != dtype) {
    throw CaseFormatError("tensor '" + name + "' has dtype " + std::string(formats::npy_descr(array.dtype)) +
                          ", expected " + std::string(formats::npy_descr(dtype)));
  }
  bool fits = array.shape.size() == shape.size();
  for (std::size_t i = 0; fits && i < shape.size(); ++i) {
    fits = shape[i] == kAnyRows ? array.shape[i] > 0 : array.shape[i] == shape[i];
  }
  if (!fits) {
    throw CaseFormatError("tensor '" + name + "' has shape " + array.shape_string() + ", expected " +
                          shape_string(shape));
  }
}

void write_case_directory(const std::filesystem::path& directory, const std::string& case_json,
                          const std::map<std::string, formats::NpyArray>& tensors) {
  // What may be replaced: a previous case's files, regular files only (a symlink is not followed, a subfolder
  // named foo.npy is not a tensor).
  const auto case_file = [](const std::filesystem::directory_entry& entry) {
    const auto file = entry.path().filename();
    return std::filesystem::is_regular_file(entry.symlink_status()) &&
           (file == kCaseJson || file.extension() == ".npy");
  };
  try {
    storage::StagedDirectory staged(directory, case_file, "golden case");
    for (const auto& [name, array] : tensors)
      storage::write_file_synced(staged.path() / (name + ".npy"), formats::serialize_npy(array));
    storage::write_file_synced(staged.path() / kCaseJson, case_json);  // last: a folder without it is no case
    staged.commit();
  } catch (const storage::StorageError& e) {
    throw CaseFormatError(e.what());
  }
}

}  // namespace moe::golden
