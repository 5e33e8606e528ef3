#include "cuda/nccl_world.hpp"

#include "cuda/device_probe.hpp"

#ifdef MOE_HAVE_NCCL
#include "cuda/device_staged_communicator.hpp"
#include "cuda/nccl_communicator.hpp"
#endif

#include <unistd.h>

#include <algorithm>
#include <functional>
#include <stdexcept>

namespace moe::cuda {

std::vector<int> local_ranks(std::span<const std::int64_t> host_ids) {
  std::vector<int> local(host_ids.size());
  for (std::size_t r = 0; r < host_ids.size(); ++r)
    local[r] = int(std::count(host_ids.begin(), host_ids.begin() + std::ptrdiff_t(r), host_ids[r]));
  return local;
}

int device_for_rank(int local_rank, int ranks_on_host, int visible, const std::string& host) {
  if (visible <= 0)
    throw std::invalid_argument("--backend nccl: host " + host +
                                " has no visible CUDA device (NCCL ranks run on GPUs)");
  // One visible GPU: a launcher may have given each rank its own through CUDA_VISIBLE_DEVICES; if not, NCCL
  // itself refuses two ranks on one GPU ("Duplicate GPU detected").
  if (visible == 1) return 0;
  if (ranks_on_host > visible)
    throw std::invalid_argument("--backend nccl: " + std::to_string(ranks_on_host) + " ranks on host " + host +
                                ", which has " + std::to_string(visible) +
                                " visible GPU(s); NCCL takes one GPU per rank (start at most " +
                                std::to_string(visible) + " ranks per host, or use --backend mpi --kernels cuda)");
  return local_rank;
}

namespace {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown";
  return name;
}

}  // namespace

NcclWorld join_nccl_world(Communicator& bootstrap) {
  const std::string host = host_name();
  // Every rank takes part in the exchange before any refuses, so that a refusal cannot leave a peer waiting in it.
  const std::int64_t mine = std::int64_t(std::hash<std::string>{}(host) >> 1);
  std::vector<std::int64_t> ids(std::size_t(bootstrap.size()));
  bootstrap.allgather<std::int64_t>(std::span(&mine, 1), ids);
  const std::vector<int> local = local_ranks(ids);
  const int on_host = int(std::count(ids.begin(), ids.end(), mine));
  const int device = device_for_rank(local[std::size_t(bootstrap.rank())], on_host, visible_device_count(), host);
#ifdef MOE_HAVE_NCCL
  auto nccl = std::make_unique<NcclCommunicator>(bootstrap, device);
  return {device, std::make_unique<DeviceStagedCommunicator>(std::move(nccl), bootstrap, device)};
#else
  throw std::invalid_argument("--backend nccl: this build has no NCCL (CMake found no nccl.h / libnccl; set "
                              "MOE_NCCL_ROOT, e.g. to the nvidia-nccl wheel's folder)");
#endif
}

}  // namespace moe::cuda
