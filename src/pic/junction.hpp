#pragma once
// Junction windows (MATH.md §5): the first w tokens of every reused segment are recomputed
// under the true prefix instead of being taken from the cache.
#include <cstdint>
#include <string>

namespace hypic::pic {

struct JunctionSpec {
  int width = 8;          // tokens per segment, used when fraction == 0 (0 turns it off)
  double fraction = 0.0;  // in (0, 1]: ceil(fraction · n) tokens of an n-token segment

  // The window of an n-token segment: the width (or share) capped at n − 1, so every
  // segment keeps at least one cached token and has an entry.
  int tokens_for(int64_t n) const;
  // The integer the store records as its junction width: the width itself, or
  // −round(fraction · 10000) for a share (−2500 for 0.25), so stores made with a fixed
  // width and with a share never mix.
  int store_code() const;
  std::string to_string() const;  // "8", "0.25"

  // "8" → 8 tokens; "0.25" or "1.0" (a decimal point, or a value strictly between 0 and
  // 1) → a share. Throws hypic::Error for negative values, shares above 1, or non-numbers.
  static JunctionSpec parse(const std::string& text);
  static JunctionSpec from_store_code(int code);
};

}  // namespace hypic::pic
