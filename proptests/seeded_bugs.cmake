# The seeded-bug matrix (distributed/seeded_bugs.hpp). Each variant recompiles only the distributed source that
# holds its switch, with -DMOE_SEEDED_BUG=<n>, and links it ahead of libmoe_distributed.a: the archive member
# with the same symbols is then never pulled in. Its test runs the property that catches the bug and passes
# only when each listed property fails (run_seeded_bug.cmake), printing RapidCheck's shrunk counterexample.
#
#   name                          number  source                  properties that must fail (':'-separated)
set(MOE_SEEDED_BUGS
  "expert_grad_edp_twice          1  train/grad_sync.cpp           TrainStep.MatchesGlobalStepOracle:Optimizer.DdpStepMatchesTrajectory:Optimizer.DistributedStepMatchesTrajectory"
  "expert_grad_ep_times           2  train/grad_sync.cpp           TrainStep.SumEqualsAvgEqualsPerToken:Optimizer.DdpStepMatchesTrajectory:Optimizer.DistributedStepMatchesTrajectory"
  "sp_grad_not_summed_over_tp     3  train/grad_sync.cpp           TrainStep.DroplessIndependentOfLayout:Optimizer.DdpStepMatchesTrajectory:Optimizer.DistributedStepMatchesTrajectory"
  "probs_applied_twice            4  kernels/grouped_swiglu.cpp      TrainStep.MatchesGlobalStepOracle"
  "chunk_sort_skipped             5  dispatch/alltoall_dispatcher.cpp Dispatch.ProvenanceTagsArriveWhereTheMapSays:Dispatch.ProvenanceTagsArriveWhereTheMapSaysFloat:TrainStep.IndependentOfDispatcher"
  "combine_unswapped_splits       6  dispatch/alltoall_dispatcher.cpp Dispatch.IdentityExpertsCombineToWeightedSum:TrainStep.IndependentOfDispatcher"
  "etp_partials_not_summed        7  dispatch/alltoall_dispatcher.cpp Dispatch.IdentityExpertsCombineToWeightedSumFloat:Dispatch.IdentityExpertsCombineToWeightedSum"
  "aux_scale_missing_cp           8  train/loss_weights.cpp        TrainStep.MatchesGlobalStepOracle"
  "per_token_aux_missing_tp_cp    9  train/loss_weights.cpp        TrainStep.SumEqualsAvgEqualsPerToken"
  "global_aux_dp_too_small        10 train/loss_weights.cpp        TrainStep.MatchesGlobalStepOracle"
  "bias_counts_before_dropping    11 train/local_router.cpp        TrainStep.ExpertBiasUpdateMatchesOracleOnEveryRank"
  "padding_mask_wrong_axis        12 train/local_router.cpp        TrainStep.ExpertBiasUpdateMatchesOracleOnEveryRank"
  "hash_weights_not_renormalised  13 train/local_router.cpp        TrainStep.HashRoutingAlignment"
  "etp_shard_gate_up_unpaired     14 train/layer_shard.cpp         Sharding.GatheredWeightsRoundTripToTheGlobalOnes"
  "z_loss_local_tokens            15 train/router_statistics.cpp   TrainStep.MatchesGlobalStepOracle"
  "seq_aux_not_averaged           16 train/router_statistics.cpp   TrainStep.CapacityMatchesOracleOnPartition"
  "hash_ids_not_transposed        17 train/train_step.cpp          TrainStep.HashRoutingAlignment"
  "ce_per_cp_rank_microbatch_count 18 train/loss_weights.cpp       TrainStep.MegatronProfileMatchesOracle"
  "z_local_mean_not_split         19 train/router_statistics.cpp   TrainStep.MegatronProfileMatchesOracle"
  "seq_aux_own_length             20 train/router_statistics.cpp   TrainStep.MegatronProfileMatchesOracle"
  "bias_counts_slots_ignored      21 train/local_router.cpp        TrainStep.MegatronProfileMatchesOracle"
  "clip_sp_counted_per_tp_rank    22 train/rank_optimizer.cpp      Optimizer.ClippedStepMatchesTrajectory"
  "clip_expert_not_summed_over_ep 23 train/rank_optimizer.cpp      Optimizer.ClippedStepMatchesTrajectory"
  "clip_expert_replicas_counted   24 train/rank_optimizer.cpp      Optimizer.ClippedStepMatchesTrajectory"
  "muon_shard_orthogonalised      25 train/muon_exchange.cpp       Optimizer.MuonStepMatchesTrajectory"
  "muon_update_to_wrong_rank      26 train/muon_exchange.cpp       Optimizer.MuonStepMatchesTrajectory"
  "fp8_scale_per_row              27 kernels/fp8_rows.cpp          Fp8.RowCastMatchesTheOracleInDouble"
  "e4m3_overflow_to_nan           28 kernels/fp8_rows.cpp          Fp8.E4m3EncodeMatchesTheReference"
  "cp_zigzag_second_half_reversed 29 train/cp_attention.cpp        Attention.ContextParallelMatchesTheOracle"
  "cp_gather_dkv_not_reduced      30 train/cp_attention.cpp        Attention.ContextParallelMatchesTheOracle"
  "cp_ring_one_step_short         31 train/cp_attention.cpp        Attention.ContextParallelMatchesTheOracle"
  "attention_dx_not_reduce_scattered 32 train/attention_rank.cpp TrainStep.AttentionModelMatchesOracle"
  "mtp_gradient_not_into_main     33 train/train_step.cpp          TrainStep.MtpModelMatchesOracle"
  "bf16_partial_sums_stored       34 kernels/grouped_swiglu.cpp    TrainStep.Bf16StorageMatchesOracle"
  "bf16_main_params_in_bf16       35 train/rank_trainer.cpp        Optimizer.Bf16MainParametersMatchTrajectory"
  "bf16_ring_partials_stored      36 train/cp_attention.cpp        Attention.ContextParallelMatchesTheOracle"
  "mtp_per_token_global_ratio     37 train/train_step.cpp          TrainStep.MegatronProfileMatchesOracle"
  "bf16_mtp_projection_not_stored 38 train/mtp_rank.cpp            TrainStep.Bf16StorageMatchesOracle"
  "egtp_wgrad_all_reduced         39 train/grad_sync.cpp           TrainStep.GtpMatchesOracle:Optimizer.GtpStepMatchesTrajectory"
  "router_not_reduced_over_gtp    40 train/grad_sync.cpp           TrainStep.GtpMatchesOracle:Optimizer.GtpStepMatchesTrajectory"
  "replica_wgrad_not_returned     41 train/expert_replication.cpp  TrainStep.ReplicatedExpertsMatchOracle:Optimizer.ReplicatedStepsMatchTrajectory"
  "wave_combine_before_compute    42 train/expert_waves.cpp        TrainStep.WavedExpertsBitwiseUnwaved"
  "hash_counts_padded_tokens      43 train/local_router.cpp        TrainStep.HashRoutingAlignment"
  "mtp_depth_scale_missing        44 train/train_step.cpp          TrainStep.MtpModelMatchesOracle"
  "batched_wgrad_unscaled_by_prob 45 ../reference/expert_batched.cpp Oracle.ExpertBatchedMatchesPerToken"
  "streamed_grad_prob_dropped     46 ../reference/expert_batched.cpp Oracle.StreamedExpertsAreTheLayer"
)

foreach(entry IN LISTS MOE_SEEDED_BUGS)
  string(REGEX REPLACE " +" ";" fields "${entry}")
  list(GET fields 0 name)
  list(GET fields 1 number)
  list(GET fields 2 source)
  list(GET fields 3 property)
  set(target proptests_bug_${name})
  add_executable(${target} $<TARGET_OBJECTS:moe_properties> ${PROJECT_SOURCE_DIR}/distributed/${source})
  target_compile_definitions(${target} PRIVATE MOE_SEEDED_BUG=${number})
  target_link_libraries(${target} PRIVATE moe_properties GTest::gtest_main moe_warnings)
  add_test(NAME proptests.seeded_bug.${name}
    COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:${target}> -DPROPERTIES=${property}
            -P ${CMAKE_CURRENT_SOURCE_DIR}/run_seeded_bug.cmake)
  set_tests_properties(proptests.seeded_bug.${name} PROPERTIES TIMEOUT 300)
endforeach()
