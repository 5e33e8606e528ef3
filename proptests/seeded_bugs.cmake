# The seeded-bug matrix: historical bug classes of parallel MoE training (and two of the oracle's fast path), each
# kept as a patch in seeded_bugs/<NN>-<name>.patch against one product source. The build applies the patch to a copy
# of that source in the build tree and compiles the copy into a variant, proptests_bug_<name>, linked ahead of the
# libraries: the archive member with the same symbols is then never pulled in. A patch that no longer applies fails
# the build, naming it (apply_seeded_bug.cmake). Each variant's test runs the properties that catch its bug and passes
# only when each of them fails (run_seeded_bug.cmake), printing RapidCheck's shrunk counterexample. Numbers are
# stable: the kill table in README.md names them (tools/tests/kill_table.sh checks both, and the patch files).
#
#  name, number, source (repo-relative), properties that must fail (':'-separated)
set(MOE_SEEDED_BUGS
  "expert_grad_edp_twice             1  distributed/train/grad_sync.cpp              TrainStep.MatchesGlobalStepOracle:Optimizer.DdpStepMatchesTrajectory:Optimizer.DistributedStepMatchesTrajectory"
  "expert_grad_ep_times              2  distributed/train/grad_sync.cpp              TrainStep.SumEqualsAvgEqualsPerToken:Optimizer.DdpStepMatchesTrajectory:Optimizer.DistributedStepMatchesTrajectory"
  "sp_grad_not_summed_over_tp        3  distributed/train/grad_sync.cpp              TrainStep.DroplessIndependentOfLayout:Optimizer.DdpStepMatchesTrajectory:Optimizer.DistributedStepMatchesTrajectory"
  "probs_applied_twice               4  distributed/kernels/grouped_swiglu.cpp       TrainStep.MatchesGlobalStepOracle"
  "chunk_sort_skipped                5  distributed/dispatch/alltoall_dispatcher.cpp Dispatch.ProvenanceTagsArriveWhereTheMapSays:Dispatch.ProvenanceTagsArriveWhereTheMapSaysFloat:TrainStep.IndependentOfDispatcher"
  "combine_unswapped_splits          6  distributed/dispatch/alltoall_dispatcher.cpp Dispatch.IdentityExpertsCombineToWeightedSum:TrainStep.IndependentOfDispatcher"
  "etp_partials_not_summed           7  distributed/dispatch/alltoall_dispatcher.cpp Dispatch.IdentityExpertsCombineToWeightedSumFloat:Dispatch.IdentityExpertsCombineToWeightedSum"
  "aux_scale_missing_cp              8  distributed/train/loss_weights.cpp           TrainStep.MatchesGlobalStepOracle"
  "per_token_aux_missing_tp_cp       9  distributed/train/loss_weights.cpp           TrainStep.SumEqualsAvgEqualsPerToken"
  "global_aux_dp_too_small           10 distributed/train/loss_weights.cpp           TrainStep.MatchesGlobalStepOracle"
  "bias_counts_before_dropping       11 distributed/train/local_router.cpp           TrainStep.ExpertBiasUpdateMatchesOracleOnEveryRank"
  "padding_mask_wrong_axis           12 distributed/train/local_router.cpp           TrainStep.ExpertBiasUpdateMatchesOracleOnEveryRank"
  "hash_weights_not_renormalised     13 distributed/train/local_router.cpp           TrainStep.HashRoutingAlignment"
  "etp_shard_gate_up_unpaired        14 distributed/train/layer_shard.cpp            Sharding.GatheredWeightsRoundTripToTheGlobalOnes"
  "z_loss_local_tokens               15 distributed/train/router_statistics.cpp      TrainStep.MatchesGlobalStepOracle"
  "seq_aux_not_averaged              16 distributed/train/router_statistics.cpp      TrainStep.CapacityMatchesOracleOnPartition"
  "hash_ids_not_transposed           17 distributed/train/train_step.cpp             TrainStep.HashRoutingAlignment"
  "ce_per_cp_rank_microbatch_count   18 distributed/train/loss_weights.cpp           TrainStep.MegatronProfileMatchesOracle"
  "z_local_mean_not_split            19 distributed/train/router_statistics.cpp      TrainStep.MegatronProfileMatchesOracle"
  "seq_aux_own_length                20 distributed/train/router_statistics.cpp      TrainStep.MegatronProfileMatchesOracle"
  "bias_counts_slots_ignored         21 distributed/train/local_router.cpp           TrainStep.MegatronProfileMatchesOracle"
  "clip_sp_counted_per_tp_rank       22 distributed/train/rank_optimizer.cpp         Optimizer.ClippedStepMatchesTrajectory"
  "clip_expert_not_summed_over_ep    23 distributed/train/rank_optimizer.cpp         Optimizer.ClippedStepMatchesTrajectory"
  "clip_expert_replicas_counted      24 distributed/train/rank_optimizer.cpp         Optimizer.ClippedStepMatchesTrajectory"
  "muon_shard_orthogonalised         25 distributed/train/muon_exchange.cpp          Optimizer.MuonStepMatchesTrajectory"
  "muon_update_to_wrong_rank         26 distributed/train/muon_exchange.cpp          Optimizer.MuonStepMatchesTrajectory"
  "fp8_scale_per_row                 27 distributed/kernels/fp8_rows.cpp             Fp8.RowCastMatchesTheOracleInDouble"
  "e4m3_overflow_to_nan              28 distributed/kernels/fp8_rows.cpp             Fp8.E4m3EncodeMatchesTheReference"
  "cp_zigzag_second_half_reversed    29 distributed/train/cp_attention.cpp           Attention.ContextParallelMatchesTheOracle"
  "cp_gather_dkv_not_reduced         30 distributed/train/cp_attention.cpp           Attention.ContextParallelMatchesTheOracle"
  "cp_ring_one_step_short            31 distributed/train/cp_attention.cpp           Attention.ContextParallelMatchesTheOracle"
  "attention_dx_not_reduce_scattered 32 distributed/train/attention_rank.cpp         TrainStep.AttentionModelMatchesOracle"
  "mtp_gradient_not_into_main        33 distributed/train/train_step.cpp             TrainStep.MtpModelMatchesOracle"
  "bf16_partial_sums_stored          34 distributed/kernels/grouped_swiglu.cpp       TrainStep.Bf16StorageMatchesOracle"
  "bf16_main_params_in_bf16          35 distributed/train/rank_trainer.cpp           Optimizer.Bf16MainParametersMatchTrajectory"
  "bf16_ring_partials_stored         36 distributed/train/cp_attention.cpp           Attention.ContextParallelMatchesTheOracle"
  "mtp_per_token_global_ratio        37 distributed/train/train_step.cpp             TrainStep.MegatronProfileMatchesOracle"
  "bf16_mtp_projection_not_stored    38 distributed/train/mtp_rank.cpp               TrainStep.Bf16StorageMatchesOracle"
  "egtp_wgrad_all_reduced            39 distributed/train/grad_sync.cpp              TrainStep.GtpMatchesOracle:Optimizer.GtpStepMatchesTrajectory"
  "router_not_reduced_over_gtp       40 distributed/train/grad_sync.cpp              TrainStep.GtpMatchesOracle:Optimizer.GtpStepMatchesTrajectory"
  "replica_wgrad_not_returned        41 distributed/train/expert_replication.cpp     TrainStep.ReplicatedExpertsMatchOracle:Optimizer.ReplicatedStepsMatchTrajectory"
  "wave_combine_before_compute       42 distributed/train/expert_waves.cpp           TrainStep.WavedExpertsBitwiseUnwaved"
  "hash_counts_padded_tokens         43 distributed/train/local_router.cpp           TrainStep.HashRoutingAlignment"
  "mtp_depth_scale_missing           44 distributed/train/train_step.cpp             TrainStep.MtpModelMatchesOracle"
  "batched_wgrad_unscaled_by_prob    45 reference/expert_batched.cpp                 Oracle.ExpertBatchedMatchesPerToken"
  "streamed_grad_prob_dropped        46 reference/expert_batched.cpp                 Oracle.StreamedExpertsAreTheLayer"
)

find_program(PATCH_EXECUTABLE patch REQUIRED)

foreach(entry IN LISTS MOE_SEEDED_BUGS)
  string(REGEX REPLACE " +" ";" fields "${entry}")
  list(GET fields 0 name)
  list(GET fields 1 number)
  list(GET fields 2 source)
  list(GET fields 3 property)
  if(number LESS 10)
    set(patch_name 0${number}-${name}.patch)
  else()
    set(patch_name ${number}-${name}.patch)
  endif()
  set(patch_file ${CMAKE_CURRENT_SOURCE_DIR}/seeded_bugs/${patch_name})
  if(NOT EXISTS ${patch_file})
    message(FATAL_ERROR "seeded bug ${name}: proptests/seeded_bugs/${patch_name} is missing")
  endif()
  set(original ${PROJECT_SOURCE_DIR}/${source})
  get_filename_component(original_dir ${original} DIRECTORY)
  get_filename_component(file_name ${source} NAME)
  set(patched ${CMAKE_CURRENT_BINARY_DIR}/seeded_bugs/${name}/${file_name})
  add_custom_command(OUTPUT ${patched}
    COMMAND ${CMAKE_COMMAND} -DPATCH=${PATCH_EXECUTABLE} -DORIGINAL=${original} -DPATCH_FILE=${patch_file}
            -DOUTPUT=${patched} -P ${CMAKE_CURRENT_SOURCE_DIR}/apply_seeded_bug.cmake
    DEPENDS ${original} ${patch_file} ${CMAKE_CURRENT_SOURCE_DIR}/apply_seeded_bug.cmake
    COMMENT "Seeded bug ${patch_name} on ${source}" VERBATIM)

  set(target proptests_bug_${name})
  add_executable(${target} $<TARGET_OBJECTS:moe_properties> ${patched})
  target_include_directories(${target} PRIVATE ${original_dir})  # the copy's "sibling.hpp" includes
  target_link_libraries(${target} PRIVATE moe_properties GTest::gtest_main moe_warnings)
  add_test(NAME proptests.seeded_bug.${name}
    COMMAND ${CMAKE_COMMAND} -DBINARY=$<TARGET_FILE:${target}> -DPROPERTIES=${property}
            -P ${CMAKE_CURRENT_SOURCE_DIR}/run_seeded_bug.cmake)
  set_tests_properties(proptests.seeded_bug.${name} PROPERTIES TIMEOUT 300)
endforeach()
