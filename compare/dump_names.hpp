// The names of a moe-dump/1 rank's tensors (compare/README.md's table), once for every C++ reader and writer of the
// format: compare's presence rules and oracle assembly, and check's round trip, which writes a dump as a framework
// would. A routed expert's name depends on how the rank names its experts (dump_tensors.hpp, expert_weight_name).
// Python's capture writes the same names (python/moe_capture_write.py).
#pragma once

#include <string>

namespace moe::compare::tensor {

inline constexpr const char* kHiddenStates = "hidden_states";
inline constexpr const char* kHiddenStatesGrad = "hidden_states.grad";
inline constexpr const char* kOutput = "output";
inline constexpr const char* kOutputGrad = "output.grad";
inline constexpr const char* kPaddingMask = "padding_mask";

inline constexpr const char* kRouterWeight = "router.weight";
inline constexpr const char* kRouterWeightGrad = "router.weight.grad";
inline constexpr const char* kExpertBias = "router.expert_bias";
inline constexpr const char* kProbs = "router.probs";
inline constexpr const char* kRoutingMap = "router.routing_map";
inline constexpr const char* kLocalTokensPerExpert = "router.local_tokens_per_expert";
inline constexpr const char* kTid2Eid = "router.tid2eid";

inline constexpr const char* kSharedFc1 = "shared_experts.linear_fc1.weight";
inline constexpr const char* kSharedFc1Grad = "shared_experts.linear_fc1.weight.grad";
inline constexpr const char* kSharedFc2 = "shared_experts.linear_fc2.weight";
inline constexpr const char* kSharedFc2Grad = "shared_experts.linear_fc2.weight.grad";
inline constexpr const char* kSharedGate = "shared_experts.gate_weight";
inline constexpr const char* kSharedGateGrad = "shared_experts.gate_weight.grad";

// The file a tensor is stored in, inside its rank's folder.
inline std::string file(const std::string& name) { return name + ".npy"; }

}  // namespace moe::compare::tensor
