#pragma once
// Numbers given on the command line converted to the integer types the code uses: checked
// first, so that an out-of-range double (inf, nan, 1e308, -1) never wraps or becomes 0.
#include <cstddef>
#include <cstdio>
#include <string>

#include "hypic/error.hpp"

namespace hypic {

// The largest size in MiB whose bytes fit a 64-bit size_t: (2^64 - 1 MiB) / 1 MiB.
constexpr double kMaxMib = 17592186044415.0;

// A size in MiB (e.g. --memory-budget) in bytes; throws hypic::Error naming `option` unless
// `mib` is a finite number in [0, kMaxMib].
inline size_t mib_to_bytes(double mib, const std::string& option) {
  if (!(mib >= 0.0 && mib <= kMaxMib)) {  // also false for nan
    char got[64];
    std::snprintf(got, sizeof got, "%g", mib);
    throw Error(option + " must be a finite number of MiB from 0 to 17592186044415, not " + got);
  }
  return static_cast<size_t>(mib * 1048576.0);
}

}  // namespace hypic
