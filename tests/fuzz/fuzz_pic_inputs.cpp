// Corpus and query JSONL files of warmup / serve (app/pic_inputs.hpp): the input is a corpus
// file, a NUL byte, and a query file that may name the corpus's ids. Text goes through the
// byte-level tokenizer; the model is a small made-up config (vocabulary 300, context 64), so
// that both the vocabulary and the context checks are reachable.
#include "app/pic_inputs.hpp"
#include "fuzz_util.hpp"

using namespace hypic::app;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static hypic_fuzz::TempFile corpus_file(".corpus.jsonl");
  static hypic_fuzz::TempFile query_file(".queries.jsonl");
  static const hypic::model::Tokenizer tok = hypic::model::Tokenizer::byte_level(10);
  hypic::model::ModelConfig cfg;
  cfg.vocab_size = 300;
  cfg.max_position_embeddings = 64;
  const auto [corpus_text, query_text] = hypic_fuzz::split_at_nul(data, size);
  corpus_file.write(reinterpret_cast<const uint8_t*>(corpus_text.data()), corpus_text.size());
  query_file.write(reinterpret_cast<const uint8_t*>(query_text.data()), query_text.size());
  Corpus corpus;
  hypic_fuzz::expect_clean(
      [&] { corpus = read_corpus(corpus_file.path(), tok, cfg, BadLinePolicy::kFail); });
  hypic_fuzz::expect_clean([&] {
    const QueryFile q =
        read_queries(query_file.path(), &corpus, tok, cfg, 16, BadLinePolicy::kFail);
    for (const QuerySpec& s : q.queries) {
      size_t total = s.query.prefix.size() + s.query.question.size();
      for (const auto& seg : s.query.segments) total += seg.size();
      if (total > 64 || s.query.question.empty()) __builtin_trap();  // the checks it promises
    }
  });
  return 0;
}
