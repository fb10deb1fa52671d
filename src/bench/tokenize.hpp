#pragma once
// `hypic bench tokenize`: encode throughput of a tokenizer.
#include <cstddef>
#include <string>

#include "model/tokenizer.hpp"

namespace hypic::bench {

// A mixed sample of at least `bytes` bytes: English prose, code, numbers, CJK and accents.
std::string sample_text(size_t bytes);

struct TokenizeResult {
  size_t bytes = 0;                // of the text encoded
  size_t tokens = 0;               // it encodes to
  double mb_per_s_cached = 0;      // with the per-word merge cache
  double mb_per_s_cold_cache = 0;  // with the cache emptied before every pass
};

// Encodes `text` for at least `seconds` per measurement (best pass counts).
TokenizeResult run_tokenize(const model::Tokenizer& tok, const std::string& text, double seconds);

}  // namespace hypic::bench
