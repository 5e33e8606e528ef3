#include "distributed/dispatch/dispatcher.hpp"

#include "distributed/dispatch/allgather_dispatcher.hpp"
#include "distributed/dispatch/alltoall_dispatcher.hpp"
#include "distributed/dispatch/flex_dispatcher.hpp"

#include <stdexcept>
#include <string>

namespace moe::dist {

ExpertRange DispatchGroups::experts_here(int num_experts) const {
  return local_experts(num_experts, ep->size(), ep->rank());
}

ExpertRange DispatchGroups::experts_of_peer(int num_experts, int tp_ep_rank) const {
  return local_experts(num_experts, ep->size(), tp_ep_rank / expt_tp->size());
}

int DispatchGroups::owner_of(int expert, int num_experts) const {
  return expert / local_experts(num_experts, ep->size(), 0).count;
}

template <typename T>
std::unique_ptr<Dispatcher<T>> make_dispatcher(DispatcherKind kind, const DispatchGroups& groups, int num_experts,
                                               const KernelBackend& kernels) {
  if (!groups.ep || !groups.expt_tp || !groups.tp_ep)
    throw std::invalid_argument("dispatcher: the ep, expt_tp and tp_ep groups are all required");
  (void)groups.experts_here(num_experts);  // ep must divide num_experts
  switch (kind) {
    case DispatcherKind::alltoall: return std::make_unique<AlltoAllDispatcher<T>>(groups, num_experts, kernels);
    case DispatcherKind::allgather: return std::make_unique<AllGatherDispatcher<T>>(groups, num_experts, kernels);
    case DispatcherKind::flex: return std::make_unique<FlexDispatcher<T>>(groups, num_experts, kernels);
  }
  throw std::invalid_argument("dispatcher: unknown kind");
}

template std::unique_ptr<Dispatcher<double>> make_dispatcher<double>(DispatcherKind, const DispatchGroups&, int,
                                                                          const KernelBackend&);
template std::unique_ptr<Dispatcher<float>> make_dispatcher<float>(DispatcherKind, const DispatchGroups&, int,
                                                                          const KernelBackend&);

}  // namespace moe::dist
