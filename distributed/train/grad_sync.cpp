#include "distributed/train/grad_sync.hpp"

#include <stdexcept>

namespace moe::dist {

GradSyncPlan::GradSyncPlan(const ProcessGroups& groups, const RankGroups& comms, LossMode mode,
                           const Semantics& semantics, bool distributed_optimizer)
    : comms_(comms) {
  for (const GradSync& row : grad_sync_table(mode, group_sizes(groups), distributed_optimizer, semantics)) {
    ClassSync& c = classes_[static_cast<size_t>(row.rule.param_class)];
    c.sum_over_tp = row.rule.then_sum_over_tp;
    c.prescale = row.prescale;
    c.op = row.rule.op == SyncOp::avg ? ReduceOp::avg : ReduceOp::sum;
    c.group = row.rule.group == GroupKind::expt_dp ? comms.expt_dp.get() : comms.dp_cp.get();
    c.divide_by_global_tokens = row.rule.divide_by_global_tokens;
    c.gtp_step = row.rule.gtp_step;
    c.gtp_group = row.gtp_group == GroupKind::expt_gtp ? comms.expt_gtp.get() : comms.gtp.get();
    if (c.gtp_group->size() != row.gtp_size) throw std::logic_error("grad sync: the GTP group is not the table's");
    // _prescale_wgrads_for_mean_rs: the reduce-scatter over the GTP peers is a mean.
    if (c.gtp_sharded() && c.gtp_step == GtpStep::reduce_scatter_mean) c.prescale /= c.gtp_group->size();
  }
}

template <typename T>
void GradSyncPlan::before_collective(ParamClass param_class, std::span<T> data) const {
  const ClassSync& c = of(param_class);
  if (c.sum_over_tp) comms_.tp->allreduce<T>(data, ReduceOp::sum);
  if (c.prescale != 1.0)
    for (T& v : data) v *= static_cast<T>(c.prescale);
}

template <typename T>
void GradSyncPlan::after_collective(ParamClass param_class, std::span<T> data, double global_tokens) const {
  const ClassSync& c = of(param_class);
  if (c.gtp_group->size() > 1 && (c.gtp_step == GtpStep::all_reduce_avg || c.gtp_step == GtpStep::all_reduce_sum))
    c.gtp_group->allreduce<T>(data, c.gtp_step == GtpStep::all_reduce_avg ? ReduceOp::avg : ReduceOp::sum);
  if (c.postscale != 1.0)
    for (T& v : data) v *= static_cast<T>(c.postscale);
  if (c.divide_by_global_tokens)
    for (T& v : data) v /= static_cast<T>(global_tokens);
}

template <typename T>
void synchronise_gradients(ModelShard<T>& grads, int first_expert, const GradSyncPlan& plan, double global_tokens) {
  for (auto& t : shard_tensors(grads, first_expert)) {
    std::span<T> data(t.data, static_cast<size_t>(t.size));
    const GradSyncPlan::ClassSync& c = plan.of(t.param_class);
    plan.before_collective(t.param_class, data);
    if (c.gtp_sharded()) c.gtp_group->allreduce<T>(data, ReduceOp::sum);
    c.group->allreduce<T>(data, c.op);
    plan.after_collective(t.param_class, data, global_tokens);
  }
}

template void GradSyncPlan::before_collective<double>(ParamClass, std::span<double>) const;
template void GradSyncPlan::before_collective<float>(ParamClass, std::span<float>) const;
template void GradSyncPlan::after_collective<double>(ParamClass, std::span<double>, double) const;
template void GradSyncPlan::after_collective<float>(ParamClass, std::span<float>, double) const;
template void synchronise_gradients<double>(ModelShard<double>&, int, const GradSyncPlan&, double);
template void synchronise_gradients<float>(ModelShard<float>&, int, const GradSyncPlan&, double);

}  // namespace moe::dist
