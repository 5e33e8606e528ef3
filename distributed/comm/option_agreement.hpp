// The ranks of one job must have been started with the same options: under mpirun each process parses its own
// command line, and ranks that disagree (another --steps, --seed or --preset) would wait forever in collectives the
// others never call, or compute different problems and report the difference as a mismatch of the system under
// test. require_same_options compares every rank's options with rank 0's before any work.
#pragma once

#include "distributed/comm/communicator.hpp"

#include <string>
#include <utility>
#include <vector>

namespace moe {

// One option as the command line gave it: its name and its value(s) as text ("" for a flag).
using GivenOption = std::pair<std::string, std::string>;

// Collective over `world`. Throws the same std::invalid_argument on every rank when the lists differ, naming the
// first option (in rank 0's order; an option only some ranks gave counts too) and the ranks that differ from rank 0:
// "the ranks were started with different options: --steps is 2 on rank 0 but 3 on ranks 2, 3".
void require_same_options(Communicator& world, const std::vector<GivenOption>& options);

}  // namespace moe
