#include "pic/junction.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "hypic/error.hpp"

namespace hypic::pic {

int JunctionSpec::tokens_for(int64_t n) const {
  if (n <= 1) return 0;
  const int64_t w = fraction > 0.0 ? static_cast<int64_t>(std::ceil(fraction * n - 1e-9)) : width;
  return static_cast<int>(std::min<int64_t>(w, n - 1));
}

int JunctionSpec::store_code() const {
  return fraction > 0.0 ? -static_cast<int>(std::lround(fraction * 10000.0)) : width;
}

std::string JunctionSpec::to_string() const {
  if (fraction <= 0.0) return std::to_string(width);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", fraction);
  return buf;
}

JunctionSpec JunctionSpec::parse(const std::string& text) {
  const std::string bad =
      "--junction '" + text + "' is neither a token count (0, 8, ...) nor a share in (0, 1]";
  HYPIC_REQUIRE(!text.empty(), bad);
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  HYPIC_REQUIRE(end != nullptr && *end == '\0' && std::isfinite(value) && value >= 0.0, bad);
  JunctionSpec spec;
  const bool decimal = text.find_first_of(".eE") != std::string::npos;
  if (decimal || (value > 0.0 && value < 1.0)) {
    HYPIC_REQUIRE(value > 0.0 && value <= 1.0, bad);
    spec.width = 0;
    spec.fraction = value;
    return spec;
  }
  HYPIC_REQUIRE(value <= 1 << 20, bad);
  spec.width = static_cast<int>(value);
  return spec;
}

JunctionSpec JunctionSpec::from_store_code(int code) {
  JunctionSpec spec;
  if (code >= 0) {
    spec.width = code;
  } else {
    spec.width = 0;
    spec.fraction = -code / 10000.0;
  }
  return spec;
}

}  // namespace hypic::pic
