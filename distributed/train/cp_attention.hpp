// Causal attention (reference/attention.hpp) on one context-parallel rank. A rank holds, of every sequence of its
// microbatch, the positions cp_positions(S, cp, rank): two load-balanced chunks of S/(2·cp), chunk rank and chunk
// 2·cp − 1 − rank, so that every rank has as much causal work as the others. Its rows are i·batch + b (local
// position i of sequence b). Queries stay local; keys and values of the other positions arrive over the cp group
// in one of Megatron's two ways (its cp_comm_type):
//   all_gather  every rank gathers every K and V, attends its queries to the positions ≤ their own in position
//               order (so the forward is bitwise the single-device layer's), and the backward reduce-scatters
//               the dK and dV it accumulated for every position back to their owners;
//   p2p         a ring: cp steps, each attending to the K/V block in hand and passing it to the next rank; the
//               partial results merge by an online softmax (running max m, running sum l, output rescaled by
//               e^(m_old − m_new)); the backward recomputes each block's probabilities from the saved log-sum-exp
//               and sends each block's dK and dV around the ring with it, home after cp steps.
// Weight gradients are this rank's share: summed over cp (and dp) they are the layer's, as the gradient plan sums
// dense parameters over dp_cp.
#pragma once

#include <string_view>
#include <vector>

#include "distributed/comm/communicator.hpp"
#include "reference/attention.hpp"
#include "reference/named.hpp"

namespace moe::dist {

enum class KvExchange { all_gather, p2p };  // Megatron's cp_comm_type (its a2a and a2a+p2p are not built)
inline constexpr Named<KvExchange> kKvExchangeNames[] = {{KvExchange::all_gather, "all_gather"},
                                                         {KvExchange::p2p, "p2p"}};
constexpr std::span<const Named<KvExchange>> names_of(KvExchange) { return kKvExchangeNames; }
inline std::string_view to_string(KvExchange exchange) { return name_of(exchange); }

// The positions CP rank `rank` holds, in local order (the parallel system's own copy of the data split).
std::vector<int> cp_positions(int seq, int cp, int rank);

struct CpAttentionForward {
  std::vector<int> positions;  // of the local rows' positions, in local order
  Matrix<double> q, k, v;      // local, after RoPE
  Matrix<double> o, out;       // local
  Matrix<double> lse;          // [local rows, H]: log Σ e^score of each query row and head
};

// x: this rank's rows [seq/cp · batch, h]; `cp` the context-parallel group (collective over it).
CpAttentionForward cp_attention_forward(const AttentionConfig& config, const AttentionParams& params,
                                        const Matrix<double>& x, int batch, int seq, Communicator& cp,
                                        KvExchange exchange);
AttentionGrads cp_attention_backward(const AttentionConfig& config, const AttentionParams& params,
                                     const Matrix<double>& x, int batch, int seq, Communicator& cp, KvExchange exchange,
                                     const CpAttentionForward& forward, const Matrix<double>& dout);

}  // namespace moe::dist
