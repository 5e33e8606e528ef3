#include "distributed/comm/cma_rows.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe {
namespace {

// One system call for up to IOV_MAX pieces on each side; the kernel may stop early only at a fault.
void read_batch(pid_t pid, std::vector<iovec>& local, std::vector<iovec>& remote, std::size_t bytes) {
  const ssize_t got = process_vm_readv(pid, local.data(), local.size(), remote.data(), remote.size(), 0);
  if (got < 0) {
    throw std::runtime_error("process_vm_readv from process " + std::to_string(pid) + ": " + std::strerror(errno));
  }
  if (std::size_t(got) != bytes) {
    throw std::runtime_error("process_vm_readv from process " + std::to_string(pid) + " read " + std::to_string(got) +
                             " of " + std::to_string(bytes) + " bytes (a row lies outside the peer's buffer)");
  }
  local.clear();
  remote.clear();
}

}  // namespace

bool cma_readable(pid_t pid, std::uintptr_t address, void* into, std::size_t bytes) {
  iovec local{into, bytes};
  iovec remote{reinterpret_cast<void*>(address), bytes};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == ssize_t(bytes);
}

void cma_read_rows(pid_t pid, std::uintptr_t remote_base, std::span<const std::int64_t> remote_rows,
                   std::byte* local_base, std::span<const std::int64_t> local_rows, std::size_t row_bytes) {
  auto local_row = [&](std::size_t i) { return local_rows.empty() ? std::int64_t(i) : local_rows[i]; };
  std::vector<iovec> local, remote;
  local.reserve(IOV_MAX);
  remote.reserve(IOV_MAX);
  std::size_t batch_bytes = 0;
  for (std::size_t i = 0; i < remote_rows.size(); ++i) {
    // Row i extends each side's last piece when it follows it there, else starts a piece of its own.
    const bool local_run = i > 0 && !local.empty() && local_row(i) == local_row(i - 1) + 1;
    const bool remote_run = i > 0 && !remote.empty() && remote_rows[i] == remote_rows[i - 1] + 1;
    if ((!local_run && local.size() == IOV_MAX) || (!remote_run && remote.size() == IOV_MAX)) {
      read_batch(pid, local, remote, batch_bytes);
      batch_bytes = 0;
      --i;  // again, as the first row of the next batch
      continue;
    }
    if (local_run) local.back().iov_len += row_bytes;
    else local.push_back({local_base + std::size_t(local_row(i)) * row_bytes, row_bytes});
    if (remote_run) remote.back().iov_len += row_bytes;
    else remote.push_back({reinterpret_cast<void*>(remote_base + std::size_t(remote_rows[i]) * row_bytes), row_bytes});
    batch_bytes += row_bytes;
  }
  if (!local.empty()) read_batch(pid, local, remote, batch_bytes);
}

}  // namespace moe
