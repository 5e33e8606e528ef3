// The conformance body (distributed/tests/conformance.hpp) on one rank of a device-side world: every case must
// check something and find nothing wrong.
#pragma once

#include "distributed/tests/conformance.hpp"

#include <gtest/gtest.h>

#include <string>

namespace moe::cuda::testing {

inline void expect_conformant(Communicator& comm, const std::string& what) {
  const auto results = conformance::run_conformance(comm);
  ASSERT_FALSE(results.empty());
  for (const auto& c : results) {
    EXPECT_GT(c.tally.checked, 0) << what << ": " << c.name << " checks nothing";
    EXPECT_EQ(c.tally.wrong, 0) << what << ": " << c.name << ": #wrong " << c.tally.wrong << " of " << c.tally.checked
                                << (c.error.empty() ? "" : " (" + c.error + ")");
  }
}

}  // namespace moe::cuda::testing
