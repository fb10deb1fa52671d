#pragma once
// Inputs of `hypic warmup` and `hypic serve`: the model with its fingerprint and tokenizer,
// corpus and query JSONL files. Every line problem names FILE:LINE; a bad line either
// refuses the run (before any work, so no store is touched) or is skipped with a warning,
// as --on-bad-line chooses.
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "hypic/kernels/backend.hpp"
#include "model/forward.hpp"
#include "model/tokenizer.hpp"
#include "pic/engine.hpp"
#include "store/open.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {

enum class BadLinePolicy { kFail, kSkip };
BadLinePolicy parse_bad_line_policy(const std::string& text);  // "fail" | "skip"

struct LoadedPicModel {
  std::unique_ptr<model::Model> model;
  std::string fingerprint;
  model::Tokenizer tokenizer;
};
// The model computes on `backend` (its weights uploaded there); the fingerprint is taken from
// the weights as loaded. Without tokenizer.json in `dir`, text is refused unless
// byte_tokenizer (one token per byte).
LoadedPicModel load_pic_model(const std::string& dir,
                              const kernels::Backend& backend = kernels::host_backend(),
                              bool byte_tokenizer = false);

struct CorpusDoc {
  std::string id;
  std::vector<int32_t> tokens;
};

struct Corpus {
  std::string path;
  std::vector<CorpusDoc> docs;
  std::unordered_map<std::string, size_t> by_id;
  int skipped_lines = 0;
};

// Lines {"id": str, "text": str} or {"id": str, "tokens": [int]}; blank lines are ignored.
// Checks: non-empty, ids inside the vocabulary, at most the model's context, unique ids.
Corpus read_corpus(const std::string& path, const model::Tokenizer& tok,
                   const model::ModelConfig& cfg, BadLinePolicy policy);

struct QuerySpec {
  pic::Query query;
  std::vector<std::string> answers;  // gold answers, when given
  int line = 0;
};

struct QueryFile {
  std::vector<QuerySpec> queries;
  int skipped_lines = 0;
};

// Lines {"id", "prefix"?: text | [int], "segments": [id | {"text"} | {"tokens"}],
// "question": text | "question_tokens": [int], "max_new_tokens"?: int, "answers"?: [str]}.
// Segment ids resolve through `corpus` (may be null: then ids are an error).
QueryFile read_queries(const std::string& path, const Corpus* corpus, const model::Tokenizer& tok,
                       const model::ModelConfig& cfg, int default_max_new_tokens,
                       BadLinePolicy policy);

}  // namespace hypic::app
