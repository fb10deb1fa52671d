#include "eval/templates.hpp"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.hpp"
#include "hypic/error.hpp"

namespace hypic::eval {
namespace {

using nlohmann::json;

// Replaces every `{name}` in `text` by `value`.
void substitute(std::string& text, std::string_view name, std::string_view value) {
  const std::string key = "{" + std::string(name) + "}";
  std::string out;
  out.reserve(text.size() + value.size());
  size_t from = 0;
  while (true) {
    const size_t at = text.find(key, from);
    if (at == std::string::npos) break;
    out.append(text, from, at - from);
    out.append(value);
    from = at + key.size();
  }
  out.append(text, from, std::string::npos);
  text.swap(out);
}

}  // namespace

TemplateSet TemplateSet::parse(const std::string& json_text, const std::string& origin) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::parse_error& e) {
    throw Error(origin + ": not valid JSON (" + e.what() + ")");
  }
  HYPIC_REQUIRE(j.is_object(), origin + ": expected an object of dataset templates");
  TemplateSet set;
  set.origin_ = origin;
  for (const auto& [name, v] : j.items()) {
    if (!name.empty() && name[0] == '_') continue;  // "_comment" and the like
    const std::string where = origin + ": template '" + name + "'";
    HYPIC_REQUIRE(v.is_object(), where + " must be an object");
    PromptTemplate t;
    t.dataset = name;
    try {
      t.prefix = v.at("prefix").get<std::string>();
      t.header = v.value("header", std::string());
      t.segment = v.at("segment").get<std::string>();
      t.suffix = v.at("suffix").get<std::string>();
      t.max_answer_tokens = v.at("max_answer_tokens").get<int>();
      t.split = parse_split_rule(v.at("split").get<std::string>());
      t.metric = v.at("metric").get<std::string>();
      t.answer_first_line = v.value("answer_first_line", false);
      t.no_repeat_ngram = v.value("no_repeat_ngram", 0);
    } catch (const json::exception& e) {
      throw Error(where + ": " + e.what() +
                  " (needs prefix, segment, suffix, max_answer_tokens, split, metric)");
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
    HYPIC_REQUIRE(t.segment.find("{text}") != std::string::npos,
                  where + ": 'segment' must contain {text}");
    HYPIC_REQUIRE(t.header.find("{text}") == std::string::npos,
                  where +
                      ": 'header' must not contain {text} (it is the same for every passage "
                      "at a position)");
    HYPIC_REQUIRE(t.max_answer_tokens > 0, where + ": 'max_answer_tokens' must be positive");
    HYPIC_REQUIRE(t.no_repeat_ngram >= 0, where + ": 'no_repeat_ngram' must be 0 or more");
    HYPIC_REQUIRE(t.metric == "qa_f1" || t.metric == "exact_match" || t.metric == "rouge_l",
                  where + ": unknown metric '" + t.metric + "' (qa_f1, exact_match or rouge_l)");
    set.templates_.emplace(name, std::move(t));
  }
  HYPIC_REQUIRE(!set.templates_.empty(), origin + ": no templates");
  return set;
}

TemplateSet TemplateSet::load(const std::string& path) {
  HYPIC_REQUIRE(std::filesystem::exists(path),
                "cannot open prompt templates " + path +
                    " (run from the hypic folder or pass the templates file)");
  return parse(read_regular_file(path, "prompt templates"), path);
}

bool TemplateSet::has(const std::string& dataset) const {
  if (templates_.count(dataset)) return true;
  return dataset.size() > 2 && dataset.compare(dataset.size() - 2, 2, "_e") == 0 &&
         templates_.count(dataset.substr(0, dataset.size() - 2));
}

const PromptTemplate& TemplateSet::get(const std::string& dataset) const {
  auto it = templates_.find(dataset);
  if (it == templates_.end() && dataset.size() > 2 &&
      dataset.compare(dataset.size() - 2, 2, "_e") == 0)
    it = templates_.find(dataset.substr(0, dataset.size() - 2));
  if (it != templates_.end()) return it->second;
  std::string known;
  for (const auto& [name, t] : templates_) known += (known.empty() ? "" : ", ") + name;
  throw Error("no prompt template for dataset '" + dataset + "' in " + origin_ +
              "; known: " + known);
}

std::vector<std::string> TemplateSet::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : templates_) out.push_back(name);
  return out;
}

std::string render_segment(const PromptTemplate& t, size_t index, std::string_view text) {
  std::string s = t.segment;
  substitute(s, "index", std::to_string(index));
  substitute(s, "text", text);  // last, so {index} written inside a passage stays as is
  return s;
}

std::vector<std::string> render_segment_pieces(const PromptTemplate& t, size_t index,
                                               std::string_view text) {
  std::vector<std::string> out;
  if (!t.header.empty()) {
    std::string h = t.header;
    substitute(h, "index", std::to_string(index));
    out.push_back(std::move(h));
  }
  out.push_back(render_segment(t, index, text));
  return out;
}

std::string render_suffix(const PromptTemplate& t, std::string_view question) {
  std::string s = t.suffix;
  substitute(s, "input", question);
  return s;
}

std::string render_prompt(const PromptTemplate& t, const Example& ex) {
  std::string out = t.prefix;
  for (size_t i = 0; i < ex.segments.size(); ++i)
    for (const std::string& piece : render_segment_pieces(t, i + 1, ex.segments[i])) out += piece;
  out += render_suffix(t, ex.question);
  return out;
}

}  // namespace hypic::eval
