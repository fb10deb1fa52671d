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

// Throws hypic::Error(message) when cond is false. For user-facing checks, not invariants.
inline void require(bool cond, const std::string& message) {
  if (!cond) throw Error(message);
}

}  // namespace hypic
