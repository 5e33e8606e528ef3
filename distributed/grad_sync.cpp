#include "distributed/grad_sync.hpp"

#include "distributed/seeded_bugs.hpp"

#include <span>
#include <stdexcept>

namespace moe::dist {

template <typename T>
void synchronise_gradients(ModelShard<T>& grads, int first_expert,
                           const ProcessGroups& groups, const RankGroups& comms, LossMode mode, double global_tokens) {
  const auto table = grad_sync_table(mode, group_sizes(groups), false);
  for (auto& t : shard_tensors(grads, first_expert)) {
    const GradSync& sync = sync_rule(table, t.param_class);
    std::span<T> data(t.data, static_cast<size_t>(t.size));
#if MOE_SEEDED_BUG == MOE_BUG_EXPERT_GRAD_EP_TIMES
    const bool fsdp_expert = t.param_class == ParamClass::expert;
    if (!fsdp_expert)
      for (T& v : data) v *= static_cast<T>(sync.prescale);
    const ReduceOp op = fsdp_expert || sync.rule.op == SyncOp::avg ? ReduceOp::avg : ReduceOp::sum;
#else
    for (T& v : data) v *= static_cast<T>(sync.prescale);
    const ReduceOp op = sync.rule.op == SyncOp::avg ? ReduceOp::avg : ReduceOp::sum;
#endif
    Communicator& dp_group = sync.rule.group == GroupKind::expt_dp ? *comms.expt_dp : *comms.dp_cp;
    dp_group.allreduce<T>(data, op);
#if MOE_SEEDED_BUG == MOE_BUG_EXPERT_GRAD_EDP_TWICE
    if (t.param_class == ParamClass::expert)
      for (T& v : data) v /= static_cast<T>(comms.expt_dp->size());
#endif
#if MOE_SEEDED_BUG != MOE_BUG_SP_GRAD_NOT_SUMMED_OVER_TP
    if (sync.rule.then_sum_over_tp) comms.tp->allreduce<T>(data, ReduceOp::sum);
#endif
    if (sync.rule.divide_by_global_tokens)
      for (T& v : data) v /= static_cast<T>(global_tokens);
  }
}

template void synchronise_gradients<double>(ModelShard<double>&, int, const ProcessGroups&, const RankGroups&, LossMode,
                                           double);
template void synchronise_gradients<float>(ModelShard<float>&, int, const ProcessGroups&, const RankGroups&, LossMode,
                                          double);

}  // namespace moe::dist
