#include "cli/step/stage_catalogue.hpp"

#include <stdexcept>
#include <vector>

namespace moe::step {
namespace {

struct Entry {
  const char* id;  // phase.name
  const char* title;
  const char* why;
  const char* shape;
  bool transfer;
};

// Shared by every dispatcher: the stepper's own stages around the dispatcher calls.
const std::vector<Entry>& common() {
  static const std::vector<Entry> entries = {
      {"router.routing", "routing: affinities s, selected experts I_t, weights g",
       "each rank routes its own tokens (route_local); the routing map drives every count below", "s [n, E]", false},
      {"experts.outputs", "expert outputs g·F_e(x), grouped per local expert",
       "grouped SwiGLU on this rank's shard of each local expert; g multiplies after the activation (so the combine "
       "only adds); with ETP each shard's output is a partial sum",
       "[R, h]", false},
      {"combine_backward.grad_y", "dL/dy of this rank's tokens: the backward starts here",
       "the backward runs the same communication in reverse", "[n, h]", false},
      {"experts_backward.grad_inputs", "dL/d expert input and dL/dg of every expert row",
       "the SwiGLU backward per expert; with ETP both are partial sums over the shards", "[R, h] + dg [R]", false},
  };
  return entries;
}

const std::vector<Entry>& alltoall() {
  static const std::vector<Entry> entries = {
      {"dispatch.tokens_per_expert", "per-expert counts of this rank's tokens",
       "preprocess sums the routing map over tokens", "[E]", false},
      {"dispatch.input_splits", "input_splits: rows this rank sends to each EP rank",
       "experts are contiguous per EP rank (L = E/ep each), so the counts of each block of L experts add up", "[ep]",
       false},
      {"dispatch.global_counts", "counts for this rank's experts from every source",
       "counts are exchanged over tp_ep: rows per (ETP rank, EP source, local expert), what the chunk sort needs",
       "[etp·ep·L]", false},
      {"dispatch.output_splits", "output_splits: rows this rank receives from each EP rank",
       "the sum over its local experts of what each EP source sends it", "[ep]", false},
      {"dispatch.permute", "permuted send buffer: token rows expert-major, one copy per selected expert",
       "sorting by expert also sorts by destination (contiguous experts): block j of input_splits[j] rows goes to EP "
       "rank j; the probabilities follow in the same order",
       "[Σ input_splits, h] + p [Σ input_splits]", false},
      {"dispatch.ep_alltoallv", "received rows: EP alltoallv",
       "block j of every rank's send buffer lands on EP rank j; rows arrive source-major, output_splits per source",
       "[Σ output_splits, h] + p", true},
      {"dispatch.etp_allgather", "ETP allgather: the rows of the whole ETP group",
       "every ETP shard of an expert needs all of its input rows; the hidden dimension is not split", "[Σ_etp R, h] + p",
       true},
      {"dispatch.expert_rows", "chunk sort by local expert = the expert inputs, grouped per expert",
       "rows arrive (source, expert)-major; the grouped GEMM wants expert-major: (etp, ep, L) → (L, etp, ep)",
       "[R, h] + p [R], group_sizes [L]", false},
      {"combine.unsort_chunks", "undo the chunk sort", "back to the order the rows arrived in", "[R, h]", false},
      {"combine.etp_reduce_scatter", "ETP reduce-scatter: the shards' partial outputs summed, own rows kept",
       "FC2 of each shard gives a partial sum; the reduce-scatter completes it and undoes the allgather", "[R_own, h]",
       true},
      {"combine.ep_alltoallv_back", "return trip: EP alltoallv with the splits swapped",
       "output_splits now send and input_splits receive: every row returns to its token's rank, in permuted order",
       "[Σ input_splits, h]", true},
      {"combine.output", "unpermute: each token's k results accumulate in its row",
       "y_t = Σ_{e∈I_t} g_{t,e}·F_e(x_t): the scatter-add of the permute's copies (the label lists what was summed)",
       "[n, h]", false},
      {"combine_backward.permute", "dL/dy permuted like the tokens: one copy per selected expert",
       "the backward of the unpermute is the permute", "[Σ input_splits, h]", false},
      {"combine_backward.ep_alltoallv", "dL/dy rows to the experts: EP alltoallv", "the same splits as the dispatch",
       "[Σ output_splits, h]", true},
      {"combine_backward.etp_allgather", "ETP allgather of dL/dy rows",
       "the backward of the reduce-scatter: every shard needs the full gradient rows", "[Σ_etp R, h]", true},
      {"combine_backward.expert_rows", "dL/d expert outputs, sorted by local expert", "the same chunk sort as the dispatch",
       "[R, h]", false},
      {"dispatch_backward.unsort_chunks", "undo the chunk sort (gradient rows and dL/dg)",
       "the reverse of the forward chunk sort", "[R, h] + dg [R]", false},
      {"dispatch_backward.etp_reduce_scatter", "ETP reduce-scatter: partial input gradients summed",
       "the backward of the allgather", "[R_own, h] + dg", true},
      {"dispatch_backward.ep_alltoallv_back", "gradients return: EP alltoallv with the splits swapped",
       "the backward of the dispatch alltoallv", "[Σ input_splits, h] + dg", true},
      {"dispatch_backward.grad_tokens", "unpermute the gradients: dL/dx_t sums its k rows; dL/dg lands at (t, e)",
       "the backward of the permute is a scatter-add", "[n, h] + dL/dprobs [n, E]", false},
  };
  return entries;
}

const std::vector<Entry>& allgather() {
  static const std::vector<Entry> entries = {
      {"dispatch.peer_tokens", "tokens of every rank of the tp_ep domain", "the sizes of the allgather", "[tp_ep]",
       false},
      {"dispatch.allgather", "allgather: every token of the domain, with its probabilities",
       "simple and heavy: each rank receives every token, whichever experts it picked", "[Σ tokens, h] + probs [·, E]",
       true},
      {"dispatch.expert_rows", "select: the rows of this rank's experts, expert-major = the expert inputs",
       "each rank keeps the (token, expert) pairs of its own experts", "[R, h] + p [R]", false},
      {"combine.scatter_add", "results scatter-added into the gathered token rows",
       "a token's results from this rank's experts add up here; rows with none stay zero", "[Σ tokens, h]", false},
      {"combine.output", "reduce-scatter: summed over the domain, each rank keeps its own tokens",
       "y_t = Σ_{e∈I_t} g_{t,e}·F_e(x_t): the k results meet in the reduction (the label lists what was summed)",
       "[n, h]", true},
      {"combine_backward.allgather", "allgather of dL/dy", "the backward of the reduce-scatter", "[Σ tokens, h]", true},
      {"combine_backward.expert_rows", "select: dL/d expert outputs of this rank's experts", "the same selection",
       "[R, h]", false},
      {"dispatch_backward.scatter_add", "gradient rows (and dL/dg) scatter-added into the gathered tokens",
       "the backward of the selection", "[Σ tokens, h] + [·, E]", false},
      {"dispatch_backward.grad_tokens", "reduce-scatter: dL/dx and dL/dprobs of this rank's tokens",
       "the backward of the allgather", "[n, h] + [n, E]", true},
  };
  return entries;
}

const std::vector<Entry>& flex() {
  static const std::vector<Entry> entries = {
      {"dispatch.send_counts", "rows this rank sends to each destination of the tp_ep domain",
       "a token goes once to each destination rank that holds any of its experts (not once per expert)", "[tp_ep]",
       false},
      {"dispatch.recv_counts", "rows this rank receives from each source", "exchanged with a counts alltoall",
       "[tp_ep]", false},
      {"dispatch.permute", "send buffer: one row per (token, destination), destination-major",
       "de-duplicated per destination; the probabilities of that destination's L experts travel with the row",
       "[Σ send_counts, h] + probs [·, L]", false},
      {"dispatch.alltoallv", "received rows: alltoallv over tp_ep", "block j of every send buffer lands on rank j",
       "[Σ recv_counts, h] + probs [·, L]", true},
      {"dispatch.expert_rows", "local permute: received rows copied per selected local expert = the expert inputs",
       "the copies per expert are made on the receiver, after the exchange", "[R, h] + p [R]", false},
      {"combine.combine_local", "a token's local results summed into one row",
       "one row per received token goes back, whatever number of local experts it used", "[Σ recv_counts, h]", false},
      {"combine.alltoallv_back", "return trip: alltoallv with the counts swapped", "each row returns to its source",
       "[Σ send_counts, h]", true},
      {"combine.output", "sum the returned rows: each token's results accumulate in its row",
       "y_t = Σ_{e∈I_t} g_{t,e}·F_e(x_t) (the label lists what was summed)", "[n, h]", false},
      {"combine_backward.permute", "dL/dy rows, one per (token, destination)", "the backward of the final sum",
       "[Σ send_counts, h]", false},
      {"combine_backward.alltoallv", "dL/dy rows to the experts: alltoallv", "the same counts as the dispatch",
       "[Σ recv_counts, h]", true},
      {"combine_backward.expert_rows", "dL/d expert outputs, copied per local expert", "the local permute again",
       "[R, h]", false},
      {"dispatch_backward.combine_local", "gradient rows (and dL/dg per local expert) summed per received token",
       "the backward of the local permute", "[Σ recv_counts, h] + [·, L]", false},
      {"dispatch_backward.alltoallv_back", "gradients return: alltoallv with the counts swapped",
       "the backward of the dispatch alltoallv", "[Σ send_counts, h] + [·, L]", true},
      {"dispatch_backward.grad_tokens", "dL/dx summed over destinations; dL/dprobs placed at (t, e)",
       "the backward of the send permute", "[n, h] + [n, E]", false},
  };
  return entries;
}

const std::vector<Entry>& entries_of(dist::DispatcherKind kind) {
  switch (kind) {
    case dist::DispatcherKind::alltoall: return alltoall();
    case dist::DispatcherKind::allgather: return allgather();
    case dist::DispatcherKind::flex: return flex();
  }
  throw std::logic_error("step: unknown dispatcher");
}

}  // namespace

Stage catalogue_stage(dist::DispatcherKind kind, const std::string& phase, const std::string& name, bool is_counts) {
  const std::string id = phase + "." + name;
  for (const auto* list : {&common(), &entries_of(kind)})
    for (const Entry& e : *list)
      if (id == e.id) {
        Stage s;
        s.id = id;
        s.phase = phase;
        s.name = name;
        s.kind = phase == "router" ? StageKind::routing : is_counts ? StageKind::counts : StageKind::rows;
        s.title = e.title;
        s.why = e.why;
        s.shape = e.shape;
        s.transfer = e.transfer;
        return s;
      }
  throw std::logic_error("step: the " + std::string(dist::to_string(kind)) + " dispatcher reported stage " + id +
                         ", which the stage catalogue does not describe (rule: every reported stage is explained)");
}

}  // namespace moe::step
