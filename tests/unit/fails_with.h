// fails_with(status_or_result, needle): a gtest assertion that a Status / Result is an error whose message names
// what the test expects. Shared by the unit tests of every module.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace mopt::test {

// Fails the test (returns false) when `status_or_result` is ok or its message lacks `needle`.
template <class R>
::testing::AssertionResult fails_with(const R& r, const std::string& needle) {
  if (r.is_ok()) return ::testing::AssertionFailure() << "expected an error containing '" << needle << "', got ok";
  if (r.message().find(needle) == std::string::npos)
    return ::testing::AssertionFailure() << "error '" << r.message() << "' lacks '" << needle << "'";
  return ::testing::AssertionSuccess();
}

}  // namespace mopt::test
