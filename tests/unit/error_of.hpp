#pragma once
// The message of the hypic::Error a callable throws, or "" when it throws none: for tests that
// check what a user would read.
#include <string>

#include "hypic/error.hpp"

namespace test_util {

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const hypic::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace test_util
