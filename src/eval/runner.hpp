#pragma once
// The library side of `hypic eval` (docs/eval.md): a dataset's examples as engine queries,
// each mode's answers scored into LongBench pred-file lines, and the table and summary that
// compare the modes. The command (src/app/eval_cmd.cpp) parses, wires the ranks and writes
// files; everything here runs without MPI, a store or the CLI.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/datasets.hpp"
#include "eval/templates.hpp"
#include "model/tokenizer.hpp"
#include "pic/engine.hpp"

namespace hypic::eval {

struct EvalItem {
  Example example;
  pic::Query query;
};

// The examples rendered with `tmpl` and tokenized: the template's prefix, one segment per
// context piece, the question suffix, `max_new_tokens` to answer. An example without context
// pieces, or whose prompt and answer exceed `context` tokens, is left out and named in
// `skipped` ("ID (why)").
std::vector<EvalItem> make_items(const std::vector<Example>& examples, const PromptTemplate& tmpl,
                                 const model::Tokenizer& tok, int64_t context, int max_new_tokens,
                                 std::vector<std::string>& skipped);

// One mode's scores, example by example.
class ModeScorer {
 public:
  ModeScorer(pic::Mode mode, const PromptTemplate& tmpl);
  // The prediction line of `item` answered with `text` (decoded, special tokens dropped).
  nlohmann::json add(const EvalItem& item, const pic::QueryResult& r, const std::string& text);

  pic::Mode mode() const { return mode_; }
  double score() const;  // means over the examples so far (0 when none)
  double em() const;
  double f1() const;
  const std::vector<double>& ttft_ms() const { return ttft_ms_; }
  int64_t hits_memory() const { return hits_memory_; }
  int64_t hits_store() const { return hits_store_; }
  int64_t colds() const { return colds_; }

 private:
  pic::Mode mode_;
  std::string metric_;
  bool first_line_;
  bool qa_;
  std::vector<double> scores_, ems_, f1s_, ttft_ms_;
  int64_t hits_memory_ = 0, hits_store_ = 0, colds_ = 0;
};

bool is_qa_metric(const std::string& metric);         // every metric but rouge_l
std::string metric_label(const std::string& metric);  // "ROUGE-L", "EM" or "F1"

// The modes side by side: table.md's text and summary.json's "modes" array (scores 0-1,
// Δ against full when full was run). `predictions[i]` is the pred file of `modes[i]`.
struct ModeComparison {
  std::string table;
  nlohmann::json modes;
};
ModeComparison compare_modes(const std::vector<ModeScorer>& modes,
                             const std::vector<std::string>& predictions,
                             const std::string& metric);

}  // namespace hypic::eval
