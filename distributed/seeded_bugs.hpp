// Seeded bugs: historical bug classes of parallel MoE training, compiled into test-only variants of the
// distributed backend so that the property suite (proptests/) can show it catches each of them.
//
// The shipped library defines no bug: MOE_SEEDED_BUG is 0 and every switch compiles to the correct line. A
// variant recompiles only the translation units named below with -DMOE_SEEDED_BUG=<number> and links them
// ahead of the library (proptests/CMakeLists.txt). In a source file a switch reads
//   #if MOE_SEEDED_BUG == MOE_BUG_CHUNK_SORT_SKIPPED
//     <the wrong line>
//   #else
//     <the right line>
//   #endif
// Numbers are stable (the kill table in proptests/README.md names them); add new bugs at the end.
#pragma once

#ifndef MOE_SEEDED_BUG
#define MOE_SEEDED_BUG 0
#endif

// grad_sync.cpp — gradient scaling
#define MOE_BUG_EXPERT_GRAD_EDP_TWICE 1         // expert grads ÷ |expt_dp| once more after the collective
#define MOE_BUG_EXPERT_GRAD_EP_TIMES 2          // expert grads AVG over expt_dp without pre-scale (Megatron-FSDP
                                                // #5956: ep× too large)
#define MOE_BUG_SP_GRAD_NOT_SUMMED_OVER_TP 3    // router/norm/embedding grads not SUMmed over tp under SP
// grouped_swiglu.cpp — expert compute
#define MOE_BUG_PROBS_APPLIED_TWICE 4           // routing probabilities multiplied in twice
// alltoall_dispatcher.cpp — token movement
#define MOE_BUG_CHUNK_SORT_SKIPPED 5            // rows left in (etp, ep, expert) order, not sorted by local expert
#define MOE_BUG_COMBINE_UNSWAPPED_SPLITS 6      // the return alltoallv reuses the dispatch splits
#define MOE_BUG_ETP_PARTIALS_NOT_SUMMED 7       // the ETP reduce-scatter keeps this shard's partial unsummed
// loss_weights.cpp — auxiliary-loss scaling
#define MOE_BUG_AUX_SCALE_MISSING_CP 8          // aux backward scale 1/m instead of cp/m (PR #2217/#2237)
#define MOE_BUG_PER_TOKEN_AUX_MISSING_TP_CP 9   // per-token aux × local tokens, not × N_mb (#1652 → PR #5047)
#define MOE_BUG_GLOBAL_AUX_DP_TOO_SMALL 10      // global_aux gradient 1/dp too small (#3672, still in main)
// local_router.cpp — routing and capacity
#define MOE_BUG_BIAS_COUNTS_BEFORE_DROPPING 11  // expert-bias counts taken before capacity dropping
#define MOE_BUG_PADDING_MASK_WRONG_AXIS 12      // [T] padding mask broadcast along experts (#6111 → PR #6114)
#define MOE_BUG_HASH_WEIGHTS_NOT_RENORMALISED 13  // hash layers with k = 1 treated like learned ones (no renorm)
// layer_shard.cpp — weight sharding
#define MOE_BUG_ETP_SHARD_GATE_UP_UNPAIRED 14   // fc1 [gate; up] cut in contiguous row blocks, pairs broken
// router_statistics.cpp — router loss statistics
#define MOE_BUG_Z_LOSS_LOCAL_TOKENS 15          // z-loss normalised by this rank's tokens, not tp×cp's (#1652 class)
#define MOE_BUG_SEQ_AUX_NOT_AVERAGED 16         // seq_aux summed, not averaged, over sequences (PR #5798 class)
// train_step.cpp — the data path
#define MOE_BUG_HASH_IDS_NOT_TRANSPOSED 17      // input_ids [B, S] read in row order for [S, B] rows (the
                                                // transpose Megatron's hash routing does with input_ids.T)
// Megatron-profile paths (reference/semantics.hpp): a profile's rule implemented wrongly
#define MOE_BUG_CE_PER_CP_RANK_MICROBATCH_COUNT 18  // loss_weights.cpp: ce-per-cp-rank divides by N_mb, not N_c
#define MOE_BUG_Z_LOCAL_MEAN_NOT_SPLIT 19       // router_statistics.cpp: z-loss-local-mean without the 1/|tp_cp|
#define MOE_BUG_SEQ_AUX_OWN_LENGTH 20           // router_statistics.cpp: seq-aux-mean-length ignored
#define MOE_BUG_BIAS_COUNTS_SLOTS_IGNORED 21    // local_router.cpp: bias-counts-padded-slots ignored
// rank_optimizer.cpp — the global gradient norm of clipping
#define MOE_BUG_CLIP_SP_COUNTED_PER_TP_RANK 22  // tp-replicated (router, norms, embedding) counted on every tp rank
#define MOE_BUG_CLIP_EXPERT_NOT_SUMMED_OVER_EP 23  // expert squares summed over expt_tp and pp, not over ep
#define MOE_BUG_CLIP_EXPERT_REPLICAS_COUNTED 24  // DDP: expert squares summed over expt_dp, each replica counted
// muon_exchange.cpp — Muon's gradient and update all-to-alls
#define MOE_BUG_MUON_SHARD_ORTHOGONALISED 25    // Newton–Schulz on each rank's TP/ETP piece, not the whole matrix
#define MOE_BUG_MUON_UPDATE_TO_WRONG_RANK 26    // the update all-to-all sends member r the piece of member r + 1
// kernels/fp8_rows.cpp — the FP8 cast of dispatched rows
#define MOE_BUG_FP8_SCALE_PER_ROW 27            // one scale per row (its amax), not one per 1×128 tile
#define MOE_BUG_E4M3_OVERFLOW_TO_NAN 28         // beyond 464 the code overflows to NaN instead of saturating at 448
// train/cp_attention.cpp — context-parallel attention, one per KV exchange and one in the data split
#define MOE_BUG_CP_ZIGZAG_SECOND_HALF_REVERSED 29  // a rank's second (mirrored) chunk of positions in reverse order
#define MOE_BUG_CP_GATHER_DKV_NOT_REDUCED 30    // all_gather: each rank keeps its own dK/dV partial, no reduce-scatter
#define MOE_BUG_CP_RING_ONE_STEP_SHORT 31       // p2p: the forward ring stops after cp − 1 blocks
// train/attention_rank.cpp — attention under TP with sequence parallelism
#define MOE_BUG_ATTENTION_DX_NOT_REDUCE_SCATTERED 32  // dx: each TP rank keeps its own heads' share of its rows
// train/train_step.cpp — multi-token prediction
#define MOE_BUG_MTP_GRADIENT_NOT_INTO_MAIN 33   // the MTP depths' gradient of f⁰ never reaches the main model
// kernels/grouped_swiglu.cpp — bf16 storage
#define MOE_BUG_BF16_PARTIAL_SUMS_STORED 34     // each expert's output rounded to bf16 before the combine and the
                                                // ETP reduction add it up (bf16 reductions)
// train/cp_attention.cpp — bf16 storage
#define MOE_BUG_BF16_RING_PARTIALS_STORED 36    // p2p: the running (unnormalised) attention output stored in bf16
                                                // after each ring step instead of once whole
// train/train_step.cpp — multi-token prediction
#define MOE_BUG_MTP_PER_TOKEN_GLOBAL_RATIO 37   // mtp-per-token-local-ratio ignored: the batch's N/Nᵏ on every rank
// train/rank_trainer.cpp — bf16 storage
#define MOE_BUG_BF16_MAIN_PARAMS_IN_BF16 35     // the main parameters kept in bf16: each step's bf16 copy replaces
                                                // them, so the optimizer's updates land on rounded weights
// train/mtp_rank.cpp — bf16 storage
#define MOE_BUG_BF16_MTP_PROJECTION_NOT_STORED 38  // an MTP depth's eh_proj output kept in the working precision
// train/grad_sync.cpp — the GTP rematerialisation axes
#define MOE_BUG_EGTP_WGRAD_ALL_REDUCED 39       // routed experts' wgrad all-reduced (SUM) over expt_gtp instead of
                                                // reduce-scattered as a mean: the 1/egtp pre-scale is lost
#define MOE_BUG_ROUTER_NOT_REDUCED_OVER_GTP 40  // replicated params (router, norms, shared gate) never all-reduced over
                                                // gtp: each GTP peer keeps its own samples' gradient
// train/expert_replication.cpp — replicated hot experts
#define MOE_BUG_REPLICA_WGRAD_NOT_RETURNED 41   // a replica's wgrad never added to its owner's: the owner's gradient
                                                // holds only the rows it kept
// train/expert_waves.cpp — wave-scheduled EP
#define MOE_BUG_WAVE_COMBINE_BEFORE_COMPUTE 42  // a wave's combine issued right after its dispatch, without waiting
                                                // for its compute: it returns the zeros the output buffer holds
// train/local_router.cpp — the expert counts of hash layers (seen only through check's count comparison)
#define MOE_BUG_HASH_COUNTS_PADDED_TOKENS 43    // hash layers count padded tokens' assignments too
// train/train_step.cpp — MTP with more than one depth
#define MOE_BUG_MTP_DEPTH_SCALE_MISSING 44      // each depth's CE weighed λ, not λ/D (invisible at D = 1)

// 45 lives in reference/expert_batched.cpp (MOE_BUG_BATCHED_WGRAD_UNSCALED_BY_PROB): the oracle's expert-batched
// path takes fc2's gradient from the activation before the probability scales it.
// 46 too (MOE_BUG_STREAMED_GRAD_PROB_DROPPED): an expert streamed from outside the layer (compare's path) gives back
// no dL/dp.
