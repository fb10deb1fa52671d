#pragma once
// The library side of `hypic eval` (docs/eval.md): a dataset's examples as engine queries,
// each mode's answers scored into LongBench pred-file lines, and the table and summary that
// compare the modes. The command (src/app/eval_cmd.cpp) parses, wires the ranks and writes
// files; everything here runs without MPI, a store or the CLI.
#include <cstdint>
#include <map>
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
// context piece (preceded by its header segment when the template has one), the question suffix,
// `max_new_tokens` to answer. An example without context pieces, or whose prompt and answer exceed
// `context` tokens, is left out and named in `skipped` ("ID (why)").
std::vector<EvalItem> make_items(const std::vector<Example>& examples, const PromptTemplate& tmpl,
                                 const model::Tokenizer& tok, int64_t context, int max_new_tokens,
                                 std::vector<std::string>& skipped);

// Full recompute's answers, which the other modes are compared with question by question:
// the score per example id and, when kept, the first token's logits (for the KL).
struct FullReference {
  std::map<std::string, double> scores;
  std::map<std::string, std::vector<float>> first_logits;
};
// Another run's full mode (so that a mode run on its own, e.g. one Slurm array task or
// W = 0, is compared too): RUN/full/<dataset>.jsonl ("_id", "score") and, when present,
// RUN/full/first_token_logits.f32 (float32 [examples, vocab], rows in that file's order).
FullReference read_full_reference(const std::string& run_dir, const std::string& dataset);
// Writes that .f32 file: the logits of `ids` in that order, all rows of equal length.
void write_first_token_logits(const std::string& path, const FullReference& ref,
                              const std::vector<std::string>& ids);

// One mode's scores, example by example.
class ModeScorer {
 public:
  // With `reference` (not owned; it must outlive the scorer), each example's score is also
  // taken as a difference to full's on the same example, and the first-token KL(full ‖ mode)
  // is computed when both logits are there.
  ModeScorer(pic::Mode mode, const PromptTemplate& tmpl, const FullReference* reference = nullptr);
  // The prediction line of `item` answered with `text` (decoded, special tokens dropped).
  // QueryResult::first_logits and state_shares, when filled, add "first_token_kl" and
  // "state_contribution" (per linear layer, the mean over the example's boundaries).
  nlohmann::json add(const EvalItem& item, const pic::QueryResult& r, const std::string& text);

  pic::Mode mode() const { return mode_; }
  double score() const;  // means over the examples so far (0 when none)
  double em() const;
  double f1() const;
  const std::vector<double>& ttft_ms() const { return ttft_ms_; }
  int64_t hits_memory() const { return hits_memory_; }
  int64_t hits_store() const { return hits_store_; }
  int64_t colds() const { return colds_; }
  const std::vector<double>& deltas() const { return deltas_; }  // score − full's, per example
  const std::vector<double>& first_token_kl() const { return kls_; }
  // Per linear layer: the mean over examples of each example's mean over its boundaries.
  std::map<int, double> state_contribution() const;
  int64_t state_examples() const { return state_examples_; }

 private:
  pic::Mode mode_;
  std::string metric_;
  bool first_line_;
  bool qa_;
  const FullReference* ref_;
  // Header boundaries are left out of the state contribution: a header's few tokens are
  // nearly all in the junction window (is_header_segment).
  PromptTemplate layout_;
  std::vector<double> scores_, ems_, f1s_, ttft_ms_, deltas_, kls_;
  std::map<int, double> share_sum_;  // layer -> sum over examples of the example's mean
  int64_t state_examples_ = 0;
  int64_t hits_memory_ = 0, hits_store_ = 0, colds_ = 0;
};

bool is_qa_metric(const std::string& metric);         // every metric but rouge_l
std::string metric_label(const std::string& metric);  // "ROUGE-L", "EM" or "F1"

// The modes side by side: table.md's text and summary.json's "modes" array (scores 0-1,
// Δ against full when full was run, or against the reference; its 95 % bootstrap interval
// over examples; first-token KL to full; the state contribution of pic modes).
// `predictions[i]` is the pred file of `modes[i]`.
struct ModeComparison {
  std::string table;
  nlohmann::json modes;
};
ModeComparison compare_modes(const std::vector<ModeScorer>& modes,
                             const std::vector<std::string>& predictions,
                             const std::string& metric);

// Several runs' summary.json side by side (`hypic eval-table`, the Slurm merge job): one row
// per dataset × mode (pic modes labelled with their junction), in the order given.
std::string merge_tables(const std::vector<nlohmann::json>& summaries);

}  // namespace hypic::eval
