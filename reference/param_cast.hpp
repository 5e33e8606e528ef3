// A layer's parameters in another scalar type (every matrix cast, the integer table copied): for comparing an oracle
// or a backend in float with one in double on the same values.
#pragma once

#include "reference/moe_layer.hpp"

namespace moe {

template <typename To, typename From>
MoeParams<To> cast_params(const MoeParams<From>& p) {
  MoeParams<To> q;
  q.router_weight = p.router_weight.template cast<To>();
  q.expert_bias = p.expert_bias.template cast<To>();
  q.tid2eid = p.tid2eid;
  for (const auto& m : p.expert_fc1) q.expert_fc1.push_back(m.template cast<To>());
  for (const auto& m : p.expert_fc2) q.expert_fc2.push_back(m.template cast<To>());
  q.shared_fc1 = p.shared_fc1.template cast<To>();
  q.shared_fc2 = p.shared_fc2.template cast<To>();
  q.shared_gate = p.shared_gate.template cast<To>();
  q.latent_down = p.latent_down.template cast<To>();
  q.latent_up = p.latent_up.template cast<To>();
  return q;
}

}  // namespace moe
