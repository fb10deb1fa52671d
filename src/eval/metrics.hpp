#pragma once
// Answer quality metrics, matching the Python reference implementations to 1e-6 (golden data
// from scripts/golden/make_metrics_golden.py):
//  - exact match and token F1 after SQuAD v1.1 answer normalisation (as LongBench's
//    qa_f1_score for hotpotqa / 2wikimqa / musique / triviaqa);
//  - ROUGE-L as the `rouge-score` package computes it (rouge_scorer.RougeScorer(["rougeL"]),
//    default tokenizer, no stemmer).
// LongBench scores multi_news / gov_report with the older `rouge` package, whose ROUGE-L
// differs; docs/datasets.md explains the difference.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hypic::eval {

// SQuAD v1.1 normalize_answer: Python lower-casing, drop ASCII punctuation, drop the words
// a / an / the, collapse whitespace.
std::string normalize_answer(std::string_view text);

// 1.0 when the normalised strings are equal.
double exact_match(std::string_view prediction, std::string_view gold);
// Bag-of-tokens F1 of the normalised strings (0 when nothing is shared).
double token_f1(std::string_view prediction, std::string_view gold);

// rouge-score's default tokenizer: lower-case, every run of characters other than [a-z0-9]
// becomes a space, split.
std::vector<std::string> rouge_tokenize(std::string_view text);

struct RougeScore {
  double precision = 0, recall = 0, fmeasure = 0;
};
// ROUGE-L (longest common subsequence of tokens) of `prediction` against `target`.
RougeScore rouge_l(std::string_view target, std::string_view prediction);

// Best score over the gold answers (0 when there are none).
double max_exact_match(std::string_view prediction, const std::vector<std::string>& golds);
double max_token_f1(std::string_view prediction, const std::vector<std::string>& golds);
double max_rouge_l(std::string_view prediction, const std::vector<std::string>& golds);

// LongBench's post-processing for few-shot sets (triviaqa): the first line of the prediction
// after leading newlines.
std::string first_line(std::string_view prediction);

// Scores by metric name: "qa_f1", "exact_match" or "rouge_l" (as named in
// inputs/datasets/templates.json). Throws hypic::Error for another name.
double score(const std::string& metric, std::string_view prediction,
             const std::vector<std::string>& golds);

// Summary statistics of per-question figures (TTFT, scores).
double mean(const std::vector<double>& values);  // 0 when empty
// Linear-interpolated percentile (numpy's default) of unsorted values; 0 when empty.
double percentile(std::vector<double> values, double pct);

// The mean of per-question values with a percentile-bootstrap interval: `resamples` samples
// of values.size() questions drawn with replacement (std::mt19937_64 seeded with `seed`, so a
// rerun gives the same interval), the interval between the (1 − level)/2 and (1 + level)/2
// percentiles of their means. For paired differences (a mode's score minus full's on the same
// question) it is the interval of "Δ vs full". All zeros when `values` is empty.
struct Interval {
  double mean = 0, lo = 0, hi = 0;
};
Interval bootstrap_mean(const std::vector<double>& values, int resamples = 2000,
                        double level = 0.95, uint64_t seed = 20261201);

}  // namespace hypic::eval
