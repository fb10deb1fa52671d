#pragma once
// One exception type for every error a user can act on. It is caught once, at the
// command's edge (src/app), and printed as a single line with a non-zero exit code.
#include <stdexcept>
#include <string>

namespace hypic {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace hypic

// Throws hypic::Error(message...) when cond is false. For user-facing checks, not invariants.
// A macro so that the message, often a concatenation, is built only when the check fails:
// checks on hot paths (every KV append, every stored array) cost one branch.
#define HYPIC_REQUIRE(cond, ...)                    \
  do {                                              \
    if (!(cond)) throw ::hypic::Error(__VA_ARGS__); \
  } while (0)
