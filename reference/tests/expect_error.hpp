// The one check behind every "bad input is refused with a message naming the rule" test, in every test suite:
// make() must throw E (std::invalid_argument by default) whose message contains `fragment`. Returns the message
// (empty when nothing was thrown) for tests that check more of it. Another exception type propagates, and gtest
// reports it as a failure.
#pragma once

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace moe::test {

template <typename E = std::invalid_argument, typename F>
std::string expect_error(const std::string& fragment, F&& make) {
  try {
    make();
    ADD_FAILURE() << "accepted input that should fail with: " << fragment;
  } catch (const E& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    return what;
  }
  return {};
}

}  // namespace moe::test
