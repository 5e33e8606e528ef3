// The `config` object of the golden formats, dumps and model files (golden/README.md, "config") <-> moe::MoeConfig,
// and a model's attention block. One reader for every file that holds one: strict (an unknown key, a wrong JSON
// type or a missing required key is a FormatError naming it) and validated.
#pragma once

#include "reference/attention.hpp"
#include "reference/config.hpp"

#include <nlohmann/json_fwd.hpp>

#include <string>

namespace moe::formats {

// Absent or null keys take their defaults; the result is validated (MoeConfig::validate). With `semantics_key`
// the key "semantics" is read (Semantics::parse; a bad spec is a FormatError naming the key); without it, it is
// an unknown key (format 1).
MoeConfig config_from_json(const nlohmann::json& config, bool semantics_key = true);
// Every key of golden format 1 in the order of golden/README.md's example, unset options as null ("semantics" is
// not among them).
nlohmann::ordered_json config_to_json(const MoeConfig& config);

// A model's attention block, {"heads", "groups", "head_dim", "rope_base"}: one rule for every format that holds one
// (golden model cases, model files, the Python module's dicts). "heads" and "head_dim" are required, "groups"
// defaults to the heads (Megatron's default: no GQA), "rope_base" to AttentionConfig's; an unknown key, a wrong
// type or an invalid block (AttentionConfig::validate) is a FormatError naming `where`.
AttentionConfig attention_from_json(const nlohmann::json& block, const std::string& where);
nlohmann::ordered_json attention_to_json(const AttentionConfig& attention);

}  // namespace moe::formats
