// The files of a case directory, whatever its kind (layer or model case): case.json and one .npy per tensor,
// nothing else. Shared by the readers so that both refuse a stray file, an extra or a missing tensor, a wrong dtype
// or shape in the same words.
#pragma once

#include "formats/npy.hpp"
#include "golden/case_json.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace moe::golden {

inline constexpr const char* kCaseJson = "case.json";
// In a shape: any size > 0 in this dimension (tid2eid's vocabulary rows).
inline constexpr std::int64_t kAnyRows = -1;

// Puts back a case folder that a write without RENAME_EXCHANGE, stopped between its two renames, left missing with
// the previous case complete beside it (storage/staged_directory.hpp), as the checkpoint loader does: every
// reader of a case folder calls this first. CaseFormatError when it cannot (the message says where the case is).
void recover_case_directory(const std::filesystem::path& directory);

// The case folders (holding case.json) in `folder`, in name order, after putting back those an interrupted write
// left missing. The staging and set-aside folders of writes (<case>.tmp-<pid>-<n>, <case>.old-<pid>-<n>) are not
// cases, though they may hold a case.json: a kill leaves them, and they are the next write's to remove.
std::vector<std::filesystem::path> case_directories_in(const std::filesystem::path& folder);

// The parsed case.json of a case directory (CaseFormatError: no case.json, invalid JSON), after
// recover_case_directory.
nlohmann::json read_case_json(const std::filesystem::path& directory);

// Reads exactly the tensors named in `expected` (file stems); `check` runs on each one read, then check_finite (a
// CaseFormatError is prefixed with the directory).
std::map<std::string, formats::NpyArray> read_case_tensors(
    const std::filesystem::path& directory, const std::set<std::string>& expected,
    const std::function<void(const std::string& name, const formats::NpyArray& array)>& check);

// Throws CaseFormatError "<what> 'name' has a non-finite value nan at index 5 [0, 5]" at the first NaN or ±inf
// of a real tensor. Every real value of a case must be finite: an expected ±inf passes any comparison
// (|a − inf| ≤ atol + rtol·inf), an expected NaN none, and a NaN input may reach no output at all (a weight of an
// expert that receives no token).
void check_finite(const std::string& name, const formats::NpyArray& array, const std::string& what = "tensor");

// Throws CaseFormatError "tensor 'name' has dtype …, expected …" or "… has shape […], expected […]".
void check_dtype_and_shape(const std::string& name, const formats::NpyArray& array, formats::NpyDtype dtype,
                           const std::vector<std::int64_t>& shape);

// Writes a case folder as a whole (storage/staged_directory.hpp): the .npy files and then case.json go into a
// staging folder beside `directory`, each fsynced, and the folder takes the place of `directory` in one rename, so
// that a crash or a kill leaves the complete previous case or the complete new one there. An existing
// `directory` may hold only a previous case's files (case.json and .npy regular files): anything else — a
// subfolder, even one named foo.npy, another file — is refused with a CaseFormatError and nothing is touched.
void write_case_directory(const std::filesystem::path& directory, const std::string& case_json,
                          const std::map<std::string, formats::NpyArray>& tensors);

}  // namespace moe::golden
