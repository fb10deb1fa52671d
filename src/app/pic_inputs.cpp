#include "app/pic_inputs.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "common/files.hpp"
#include "hypic/error.hpp"
#include "model/checkpoint.hpp"
#include "pic/fingerprint.hpp"

namespace hypic::app {
namespace {
using nlohmann::json;

// A problem with one input line; carries no location (the reader adds FILE:LINE).
class LineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

void line_require(bool cond, const std::string& message) {
  if (!cond) throw LineError(message);
}

// An optional integer field in [0, 2^20]; `fallback` when absent.
int small_count(const json& j, const char* key, const std::string& what, int fallback) {
  if (!j.contains(key)) return fallback;
  const json& v = j[key];
  line_require(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= (1 << 20),
               what + " \"" + key + "\" must be an integer in [0, 1048576]");
  return v.get<int>();
}

std::string json_message(const json::exception& e) {
  const std::string what = e.what();
  const size_t close = what.find("] ");
  return close == std::string::npos ? what : what.substr(close + 2);
}

std::vector<int32_t> token_list(const json& j, const std::string& what, int vocab) {
  line_require(j.is_array(), what + " must be a list of token ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    line_require(j[i].is_number_integer(),
                 what + ": element " + std::to_string(i) + " is not an integer");
    // An id past int64 (2^63) is unsigned JSON: compare it as such, and print it as written.
    const bool in_range = j[i].is_number_unsigned()
                              ? j[i].get<uint64_t>() < uint64_t(vocab)
                              : j[i].get<int64_t>() >= 0 && j[i].get<int64_t>() < vocab;
    const int64_t v = in_range ? j[i].get<int64_t>() : 0;
    line_require(in_range, what + ": token id " + j[i].dump() + " is outside the vocabulary [0, " +
                               std::to_string(vocab) + ")");
    ids.push_back(static_cast<int32_t>(v));
  }
  return ids;
}

std::vector<int32_t> text_tokens(const json& j, const std::string& what,
                                 const model::Tokenizer& tok, int vocab, bool parse_special) {
  line_require(j.is_string(), what + " must be a string");
  tok.require_text_support();  // a missing tokenizer.json refuses the run, not just the line
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(j.get<std::string>(), parse_special);
  } catch (const Error& e) {
    throw LineError(what + ": " + e.what());
  }
  for (int32_t id : ids)
    line_require(id < vocab, what + ": the tokenizer produced id " + std::to_string(id) +
                                 ", outside the model's vocabulary of " + std::to_string(vocab));
  return ids;
}

// Runs `parse` on each non-blank line; a LineError becomes "FILE:LINE: message", which
// refuses the run or is printed as a warning, per policy. Returns the skipped lines.
int for_each_line(const std::string& path, const std::string& what, BadLinePolicy policy,
                  const std::function<void(const json&, int)>& parse) {
  require_regular_file(path, what);  // a folder, FIFO or device is no JSONL file
  std::ifstream in(path);
  HYPIC_REQUIRE(in.good(), "cannot open '" + path + "'");
  std::string text;
  int line = 0, skipped = 0;
  while (std::getline(in, text)) {
    ++line;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::string problem;
    try {
      parse(json::parse(text), line);
      continue;
    } catch (const json::parse_error& e) {
      problem = "not valid JSON (" + json_message(e) + ")";
    } catch (const json::exception& e) {
      problem = json_message(e);
    } catch (const LineError& e) {
      problem = e.what();
    }
    const std::string where = path + ":" + std::to_string(line) + ": ";
    if (policy == BadLinePolicy::kFail)
      throw Error(where + problem + " (--on-bad-line skip serves the other lines)");
    std::fprintf(stderr, "hypic: warning: %s%s; line skipped\n", where.c_str(), problem.c_str());
    ++skipped;
  }
  require_read_to_end(in, path);  // a read error is not the end of the file
  return skipped;
}

void check_segment(const std::vector<int32_t>& tokens, const std::string& what,
                   const model::ModelConfig& cfg) {
  line_require(!tokens.empty(), what + " is empty");
  line_require(static_cast<int64_t>(tokens.size()) <= cfg.max_position_embeddings,
               what + " has " + std::to_string(tokens.size()) +
                   " tokens, more than the model's context of " +
                   std::to_string(cfg.max_position_embeddings));
}

}  // namespace

BadLinePolicy parse_bad_line_policy(const std::string& text) {
  if (text == "fail") return BadLinePolicy::kFail;
  if (text == "skip") return BadLinePolicy::kSkip;
  throw Error("--on-bad-line must be 'fail' or 'skip', not '" + text + "'");
}

LoadedPicModel load_pic_model(const std::string& dir, const kernels::Backend& backend,
                              bool byte_tokenizer) {
  model::LoadedModel loaded = model::load_checkpoint(dir);
  LoadedPicModel out{
      nullptr, pic::model_fingerprint(loaded.config, loaded.weights),
      model::Tokenizer::for_model(dir, byte_tokenizer ? model::Tokenizer::Fallback::kByteLevel
                                                      : model::Tokenizer::Fallback::kRefuseText)};
  out.model = std::make_unique<model::Model>(
      std::move(loaded.config), model::to_backend(std::move(loaded.weights), backend), backend);
  return out;
}

Corpus read_corpus(const std::string& path, const model::Tokenizer& tok,
                   const model::ModelConfig& cfg, BadLinePolicy policy) {
  Corpus c;
  c.path = path;
  c.skipped_lines = for_each_line(path, "--corpus", policy, [&](const json& j, int) {
    line_require(j.is_object(), "a corpus line must be an object {\"id\", \"text\" | \"tokens\"}");
    line_require(j.contains("id") && j["id"].is_string(), "missing string field \"id\"");
    CorpusDoc d;
    d.id = j["id"].get<std::string>();
    const std::string what = "document '" + d.id + "'";
    line_require(c.by_id.count(d.id) == 0, "duplicate id '" + d.id + "'");
    if (j.contains("tokens"))
      d.tokens = token_list(j["tokens"], what + " \"tokens\"", cfg.vocab_size);
    else if (j.contains("text"))
      d.tokens = text_tokens(j["text"], what + " \"text\"", tok, cfg.vocab_size, false);
    else
      throw LineError(what + " has neither \"text\" nor \"tokens\"");
    check_segment(d.tokens, what, cfg);
    c.by_id.emplace(d.id, c.docs.size());
    c.docs.push_back(std::move(d));
  });
  if (c.docs.empty())
    std::fprintf(stderr, "hypic: warning: --corpus %s holds no documents%s\n", path.c_str(),
                 c.skipped_lines > 0 ? " (every line was skipped)" : " (the file is empty)");
  return c;
}

QueryFile read_queries(const std::string& path, const Corpus* corpus, const model::Tokenizer& tok,
                       const model::ModelConfig& cfg, int default_max_new_tokens,
                       BadLinePolicy policy) {
  QueryFile out;
  const int vocab = cfg.vocab_size;
  std::map<std::string, int> first_line;  // query id -> the line that has it
  out.skipped_lines = for_each_line(path, "--queries", policy, [&](const json& j, int line) {
    line_require(j.is_object(), "a query line must be an object");
    QuerySpec s;
    s.line = line;
    pic::Query& q = s.query;
    if (j.contains("id")) {
      line_require(j["id"].is_string() || j["id"].is_number_integer(), "\"id\" must be a string");
      q.id = j["id"].is_string() ? j["id"].get<std::string>() : j["id"].dump();  // as written
    } else {
      q.id = "line" + std::to_string(line);
    }
    const std::string what = "query '" + q.id + "'";
    // Predictions are keyed by id: two queries with one id would be two answers to one key.
    const auto seen = first_line.find(q.id);
    line_require(seen == first_line.end(),
                 "duplicate query id '" + q.id + "' (first on line " +
                     std::to_string(seen == first_line.end() ? 0 : seen->second) + ")");
    if (j.contains("prefix")) {
      const json& p = j["prefix"];
      q.prefix = p.is_array() ? token_list(p, what + " \"prefix\"", vocab)
                              : text_tokens(p, what + " \"prefix\"", tok, vocab, true);
    }
    line_require(j.contains("segments") && j["segments"].is_array(),
                 what + " needs a list \"segments\"");
    int i = 0;
    for (const json& seg : j["segments"]) {
      ++i;
      const std::string sw = what + " segment " + std::to_string(i);
      std::vector<int32_t> tokens;
      if (seg.is_string()) {
        const std::string id = seg.get<std::string>();
        line_require(corpus != nullptr,
                     sw + " names id '" + id + "' but no --corpus was given to look it up");
        auto it = corpus->by_id.find(id);
        line_require(it != corpus->by_id.end(), sw + ": unknown segment id '" + id + "' (not in " +
                                                    corpus->path + ") and no text given");
        tokens = corpus->docs[it->second].tokens;
      } else if (seg.is_object() && seg.contains("tokens")) {
        tokens = token_list(seg["tokens"], sw + " \"tokens\"", vocab);
      } else if (seg.is_object() && seg.contains("text")) {
        tokens = text_tokens(seg["text"], sw + " \"text\"", tok, vocab, false);
      } else {
        throw LineError(sw + " must be a corpus id, {\"text\": ...} or {\"tokens\": [...]}");
      }
      check_segment(tokens, sw, cfg);
      q.segments.push_back(std::move(tokens));
    }
    if (j.contains("question_tokens"))
      q.question = token_list(j["question_tokens"], what + " \"question_tokens\"", vocab);
    else if (j.contains("question"))
      q.question = text_tokens(j["question"], what + " \"question\"", tok, vocab, true);
    line_require(!q.question.empty(),
                 what + " needs a non-empty \"question\" (text) or \"question_tokens\"");
    q.max_new_tokens = small_count(j, "max_new_tokens", what, default_max_new_tokens);
    q.no_repeat_ngram = small_count(j, "no_repeat_ngram", what, 0);
    if (j.contains("answers")) {
      const json& a = j["answers"];
      if (a.is_string()) {
        s.answers.push_back(a.get<std::string>());
      } else {
        line_require(a.is_array(), what + " \"answers\" must be a list of strings");
        for (const json& x : a) {
          line_require(x.is_string(), what + " \"answers\" must be a list of strings");
          s.answers.push_back(x.get<std::string>());
        }
      }
    }
    int64_t total = static_cast<int64_t>(q.prefix.size() + q.question.size());
    for (const auto& seg : q.segments) total += static_cast<int64_t>(seg.size());
    const std::string too_long = model::context_overflow(cfg, total, q.max_new_tokens);
    line_require(too_long.empty(), what + ": " + too_long);
    first_line.emplace(q.id, line);
    out.queries.push_back(std::move(s));
  });
  if (out.queries.empty())
    std::fprintf(stderr, "hypic: warning: --queries %s holds no queries%s; nothing is answered\n",
                 path.c_str(),
                 out.skipped_lines > 0 ? " (every line was skipped)" : " (the file is empty)");
  return out;
}

}  // namespace hypic::app
