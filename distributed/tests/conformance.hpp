// The conformance body every Communicator backend must pass, in the style of nccl-tests: each case crafts its
// inputs so that every element of every result is known in advance (element i of what rank s sends to rank d is
// value(s, d, i); receive buffers start as a sentinel, so gaps that must stay untouched are checked too), runs
// collectives, and counts the elements that differ: #wrong. The same cases run on in-process worlds (GoogleTest,
// inproc_conformance_test.cpp) and under mpirun (mpi_conformance_main.cpp).
//
// Case names are "<collective>.<variant>", "split.*", "subgroup.*", "send_recv.*", and for the rules that must
// throw: "error.calls.*" (checked by the backend on the calls of all ranks) and "error.args.*" (checked by the
// front-end: peers, tags, subgroup lists). An error case counts one check, wrong unless std::invalid_argument with
// the rule's wording was thrown, plus a collective afterwards proving that the communicator still works.
#pragma once

#include "distributed/comm/communicator.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace moe::conformance {

struct Tally {
  std::int64_t checked = 0;  // elements (or outcomes) compared on this rank
  std::int64_t wrong = 0;    // those that differ from the prediction

  Tally& operator+=(const Tally& o) {
    checked += o.checked;
    wrong += o.wrong;
    return *this;
  }
};

struct Case {
  std::string name;
  std::function<Tally(Communicator&)> run;
};

// The cases for a communicator of `size` ranks (cases that need two ranks are left out of size 1). Every rank
// runs all of them, in this order.
std::vector<Case> cases(int size);

struct CaseResult {
  std::string name;
  Tally tally;        // this rank's
  double seconds;     // this rank's wall time
  std::string error;  // what the case threw on this rank, if it threw
};

// A case that throws counts as one wrong check; the next case runs. (A backend throws on every rank alike when
// the calls do not fit together, so the ranks stay in step.)
// Runs the cases whose name starts with `prefix` (all by default).
std::vector<CaseResult> run_conformance(Communicator& comm, std::string_view prefix = {});

}  // namespace moe::conformance
