#include "bench/tokenize.hpp"

#include "hypic/error.hpp"

namespace hypic::bench {

std::string sample_text(size_t bytes) {
  static const char* const kParts[] = {
      "Position-independent caching lets a prompt reuse segments in any order; ",
      "the router finds 40 hits and 3 colds, and rank 2 recomputes 1,024 tokens. ",
      "It's what we've wanted: they'd agree. ",
      "def encode(text):\n    return [vocab[t] for t in split(text)]\n",
      "位置无关缓存可以重复使用文档片段。",
      "Zoë's café serves crème brûlée at 3.50 EUR.\n\n",
  };
  std::string out;
  for (size_t i = 0; out.size() < bytes; ++i) out += kParts[i % (sizeof kParts / sizeof *kParts)];
  return out;
}

TokenizeResult run_tokenize(const model::Tokenizer& tok, const std::string& text, double seconds) {
  HYPIC_REQUIRE(!text.empty(), "the text to encode is empty");
  TokenizeResult r;
  r.bytes = text.size();
  r.tokens = tok.encode(text).size();
  r.mb_per_s_cached = model::tokenizer_bench_mb_per_s(tok, text, seconds, false);
  r.mb_per_s_cold_cache = model::tokenizer_bench_mb_per_s(tok, text, seconds, true);
  return r;
}

}  // namespace hypic::bench
