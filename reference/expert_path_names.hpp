// The names of ExpertPath (reference/moe_layer.hpp) as a table (reference/named.hpp), for the command line and the
// readers that name an oracle path. Apart from moe_layer.hpp, which most of the project includes.
#pragma once

#include "reference/moe_layer.hpp"
#include "reference/named.hpp"

#include <span>

namespace moe {

inline constexpr Named<ExpertPath> kExpertPathNames[] = {{ExpertPath::expert_batched, "expert-batched"},
                                                         {ExpertPath::per_token, "per-token"}};
constexpr std::span<const Named<ExpertPath>> names_of(ExpertPath) { return kExpertPathNames; }

}  // namespace moe
