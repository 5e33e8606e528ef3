// Rows read straight out of another process's memory on the same machine (Linux cross-memory attach,
// process_vm_readv): the single-copy path of the MPI backend's alltoallv_indexed.
//
// Two-sided MPI makes a row exchange cost three copies: the sender packs its rows, MPI moves the packed block, the
// receiver unpacks it. A non-contiguous MPI datatype does not help, as Open MPI then packs and unpacks through its
// shared-memory fragments itself. A rank that knows where its peer's rows lie reads each one, once, from where it
// lies to where it lands: one copy, as in the in-process backend, and as Open MPI does for one contiguous message.
// The kernel allows it to a process that may ptrace the other (same user; Yama's ptrace_scope 0, or 1 with a
// parent relation, is what mpirun's children have); cma_readable tells before anything relies on it.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>

namespace moe {

// Whether `bytes` at `address` in process `pid` can be read into `into` (a probe: false instead of an error).
bool cma_readable(pid_t pid, std::uintptr_t address, void* into, std::size_t bytes);

// Copies row `remote_rows[i]` of the buffer at `remote_base` in process `pid` to local row `local_rows[i]` of
// `local_base` (or to local row i when local_rows is empty), rows of `row_bytes`. Each side's runs of consecutive
// rows go as one piece of that side (the kernel fills the local pieces in order from the remote ones, whatever
// their lengths), pieces in batches of at most IOV_MAX per side and system call. The kernel looks up and pins
// the pages of each remote piece, so rows in rising remote order cost far less than scattered ones.
// std::runtime_error if the kernel refuses or reads less than asked (the peer's buffer is not where it said).
void cma_read_rows(pid_t pid, std::uintptr_t remote_base, std::span<const std::int64_t> remote_rows,
                   std::byte* local_base, std::span<const std::int64_t> local_rows, std::size_t row_bytes);

}  // namespace moe
