#pragma once
// Dataset readers: LongBench JSONL (hotpotqa, 2wikimqa, musique, multi_news, triviaqa,
// gov_report) and the original HotpotQA JSON. Each example's context becomes a list of
// segments, the unit the caching engine stores and reuses. The split rules are described
// in docs/datasets.md; which rule a dataset uses is set in inputs/datasets/templates.json.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace hypic::eval {

struct Example {
  std::string id;
  std::string dataset;                // template name, e.g. "hotpotqa"
  std::vector<std::string> segments;  // context pieces, markers removed (see SplitRule)
  std::string question;               // LongBench `input` (may be empty: summarisation)
  std::vector<std::string> answers;   // gold answers / reference summaries
  int64_t length = 0;                 // LongBench `length` (words), 0 when absent
  std::vector<std::string> all_classes;
};

enum class SplitRule {
  kPassages,   // "Passage N:" lines start passages; the marker line is removed
  kDocuments,  // "Passage N:" markers if present, else "|||||", else blank lines
  kExamples,   // few-shot blocks: a line starting with "Passage:" starts an example
  kChunks,     // lines grouped greedily into segments of at most max_segment_bytes
  kWhole,      // the whole context is one segment
};

// "passages", "documents", "examples", "chunks", "whole".
SplitRule parse_split_rule(const std::string& name);
std::string split_rule_name(SplitRule rule);

// Splits a context by `rule`. Empty (whitespace-only) segments are dropped.
std::vector<std::string> split_context(std::string_view context, SplitRule rule,
                                       size_t max_segment_bytes = 4000);

struct ReadOptions {
  bool skip_malformed = false;      // skip bad lines/records (reported) instead of throwing
  size_t limit = 0;                 // read at most this many examples (0: all)
  size_t max_segment_bytes = 4000;  // for SplitRule::kChunks
};

struct SkippedRecord {
  size_t line = 0;  // 1-based line (JSONL) or record index + 1 (JSON array)
  std::string reason;
};

struct ReadResult {
  std::vector<Example> examples;
  std::vector<SkippedRecord> skipped;
};

// LongBench JSONL: one object per line with input, context, answers, length, _id and
// all_classes. Blank lines are ignored. A malformed line throws hypic::Error naming the
// file and line, unless options.skip_malformed.
ReadResult read_longbench_jsonl(const std::string& path, const std::string& dataset, SplitRule rule,
                                const ReadOptions& options = {});

// Original HotpotQA JSON (a list of {_id, question, answer, context: [[title, [sentences]]]}):
// each [title, sentences] pair is one segment, "title\n" + the sentences joined as written.
ReadResult read_hotpotqa_json(const std::string& path, const ReadOptions& options = {});

// Picks the reader by content: a file whose first non-blank character is '[' is HotpotQA
// JSON, anything else LongBench JSONL.
ReadResult read_dataset(const std::string& path, const std::string& dataset, SplitRule rule,
                        const ReadOptions& options = {});

}  // namespace hypic::eval
