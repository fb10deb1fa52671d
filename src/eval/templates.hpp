#pragma once
// Prompt templates per dataset, loaded from one data file (inputs/datasets/templates.json).
// A prompt is  prefix + segment(1) + segment(2) + ... + suffix(question), so each segment
// can be tokenized and cached on its own. A template with a `header` puts header(i) before
// segment(i) as a segment of its own: the position-dependent text ("Passage 3:\n") stays
// out of the passage, so the same passage is one store entry at any position. For the LongBench
// sets the pieces reproduce LongBench's own prompt (config/dataset2prompt.json) around the split
// context.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "eval/datasets.hpp"

namespace hypic::eval {

constexpr const char* kDefaultTemplatesPath = "inputs/datasets/templates.json";

struct PromptTemplate {
  std::string dataset;
  std::string prefix;   // before the first segment
  std::string header;   // optional; before each segment, as its own segment; placeholder {index}
  std::string segment;  // per segment; placeholders {index} (1-based) and {text}
  std::string suffix;   // after the last segment; placeholder {input} (the question)
  int max_answer_tokens = 32;
  int no_repeat_ngram = 0;  // optional; > 0: greedy decoding never repeats an n-gram of this
                            // size within an answer (pic::Query::no_repeat_ngram)
  SplitRule split = SplitRule::kPassages;
  std::string metric = "qa_f1";    // eval/metrics.hpp score() name
  bool answer_first_line = false;  // score only the first line of a prediction (LongBench)
};

class TemplateSet {
 public:
  static TemplateSet load(const std::string& path = kDefaultTemplatesPath);
  static TemplateSet parse(const std::string& json_text, const std::string& origin);

  // The template of `dataset`; a LongBench-E name ("hotpotqa_e") falls back to its base set.
  // Throws hypic::Error listing the known names.
  const PromptTemplate& get(const std::string& dataset) const;
  bool has(const std::string& dataset) const;
  std::vector<std::string> names() const;

 private:
  std::map<std::string, PromptTemplate> templates_;
  std::string origin_;
};

std::string render_segment(const PromptTemplate& t, size_t index, std::string_view text);
// The pieces the engine sees for segment `index` (1-based): its header when the template has
// one, then the rendered segment.
std::vector<std::string> render_segment_pieces(const PromptTemplate& t, size_t index,
                                               std::string_view text);
// Whether the engine's segment `k` (0-based, in the order the pieces above come) is a header.
inline bool is_header_segment(const PromptTemplate& t, size_t k) {
  return !t.header.empty() && k % 2 == 0;
}
std::string render_suffix(const PromptTemplate& t, std::string_view question);
// The whole prompt of an example, as one string.
std::string render_prompt(const PromptTemplate& t, const Example& ex);

}  // namespace hypic::eval
