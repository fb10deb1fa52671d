#include "eval/datasets.hpp"

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/files.hpp"
#include "hypic/error.hpp"

namespace hypic::eval {
namespace {

using nlohmann::json;

bool is_blank(std::string_view s) {
  for (char c : s)
    if (!std::isspace(static_cast<unsigned char>(c))) return false;
  return true;
}

std::string_view trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::string_view drop_one_newline(std::string_view s) {
  if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

void push_segment(std::vector<std::string>& out, std::string_view s) {
  if (!is_blank(s)) out.emplace_back(s);
}

// Offsets of line starts where `marker_at(line)` returns the marker's length (0: none).
template <typename F>
std::vector<std::pair<size_t, size_t>> find_markers(std::string_view s, F&& marker_at) {
  std::vector<std::pair<size_t, size_t>> found;
  for (size_t p = 0; p < s.size();) {
    if (size_t len = marker_at(s.substr(p))) found.emplace_back(p, p + len);
    const size_t nl = s.find('\n', p);
    if (nl == std::string_view::npos) break;
    p = nl + 1;
  }
  return found;
}

// "Passage 12:\n" at the start of `line`: its length, else 0.
size_t passage_marker(std::string_view line) {
  constexpr std::string_view head = "Passage ";
  if (line.substr(0, head.size()) != head) return 0;
  size_t i = head.size();
  const size_t digits_from = i;
  while (i < line.size() && std::isdigit(static_cast<unsigned char>(line[i]))) ++i;
  if (i == digits_from || i >= line.size() || line[i] != ':') return 0;
  ++i;
  if (i < line.size() && line[i] == '\r') ++i;
  if (i < line.size() && line[i] != '\n') return 0;
  return i < line.size() ? i + 1 : i;
}

size_t example_marker(std::string_view line) {
  return line.substr(0, 8) == "Passage:" ? 8 : 0;
}

// Splits at marker lines. With keep_marker the marker stays at the start of its segment.
bool split_at_markers(std::string_view s, const std::vector<std::pair<size_t, size_t>>& markers,
                      bool keep_marker, std::vector<std::string>& out) {
  if (markers.empty()) return false;
  push_segment(out, drop_one_newline(s.substr(0, markers.front().first)));
  for (size_t i = 0; i < markers.size(); ++i) {
    const size_t from = keep_marker ? markers[i].first : markers[i].second;
    const size_t to = i + 1 < markers.size() ? markers[i + 1].first : s.size();
    push_segment(out, drop_one_newline(s.substr(from, to - from)));
  }
  return true;
}

void split_on(std::string_view s, std::string_view sep, std::vector<std::string>& out) {
  size_t from = 0;
  while (true) {
    const size_t at = s.find(sep, from);
    push_segment(out, trim(s.substr(from, at == std::string_view::npos ? s.npos : at - from)));
    if (at == std::string_view::npos) break;
    from = at + sep.size();
  }
}

// Blank-line separated blocks (runs of two or more newlines, blanks between them allowed).
void split_blank_lines(std::string_view s, std::vector<std::string>& out) {
  size_t from = 0, p = 0;
  while (p < s.size()) {
    const size_t nl = s.find('\n', p);
    if (nl == std::string_view::npos) break;
    size_t q = nl + 1;
    bool blank_line = false;
    while (q < s.size()) {
      size_t r = q;
      while (r < s.size() && (s[r] == ' ' || s[r] == '\t' || s[r] == '\r')) ++r;
      if (r < s.size() && s[r] == '\n') {
        blank_line = true;
        q = r + 1;
      } else {
        break;
      }
    }
    if (blank_line) {
      push_segment(out, trim(s.substr(from, nl - from)));
      from = q;
    }
    p = q;
  }
  push_segment(out, trim(s.substr(from)));
}

// Cut point of an over-long line: after the last space before `max`, else at a UTF-8
// character boundary at or before `max`.
size_t cut_point(std::string_view line, size_t max) {
  const size_t sp = line.rfind(' ', max - 1);
  if (sp != std::string_view::npos && sp > 0) return sp + 1;
  size_t cut = max;
  while (cut > 1 && (static_cast<unsigned char>(line[cut]) & 0xC0) == 0x80) --cut;
  return cut;
}

void split_chunks(std::string_view s, size_t max, std::vector<std::string>& out) {
  std::string cur;
  auto flush = [&] {
    push_segment(out, cur);
    cur.clear();
  };
  size_t p = 0;
  while (p <= s.size()) {
    const size_t nl = s.find('\n', p);
    std::string_view line = s.substr(p, nl == std::string_view::npos ? s.npos : nl - p);
    while (line.size() > max) {
      flush();
      const size_t cut = cut_point(line, max);
      push_segment(out, line.substr(0, cut));
      line.remove_prefix(cut);
    }
    if (!cur.empty() && cur.size() + 1 + line.size() > max) flush();
    if (!cur.empty()) cur += '\n';
    cur.append(line);
    if (nl == std::string_view::npos) break;
    p = nl + 1;
  }
  flush();
}

std::string where(const std::string& path, size_t line) {
  return path + ":" + std::to_string(line) + ": ";
}

std::vector<std::string> string_list(const json& v, const std::string& field) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (v.is_string()) return {v.get<std::string>()};
  HYPIC_REQUIRE(v.is_array(), "field '" + field + "' must be a list of strings");
  for (const auto& x : v) {
    HYPIC_REQUIRE(x.is_string(), "field '" + field + "' must be a list of strings");
    out.push_back(x.get<std::string>());
  }
  return out;
}

std::string string_field(const json& obj, const char* key, bool required) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    HYPIC_REQUIRE(!required, std::string("missing string field '") + key + "'");
    return {};
  }
  HYPIC_REQUIRE(it->is_string(), std::string("field '") + key + "' must be a string");
  return it->get<std::string>();
}

Example longbench_example(const json& obj, const std::string& dataset, SplitRule rule,
                          const ReadOptions& options, size_t line) {
  HYPIC_REQUIRE(obj.is_object(), "expected a JSON object");
  Example ex;
  ex.dataset = dataset;
  ex.id = string_field(obj, "_id", false);
  if (ex.id.empty()) ex.id = dataset + "-line" + std::to_string(line);
  ex.question = string_field(obj, "input", false);
  ex.segments = split_context(string_field(obj, "context", true), rule, options.max_segment_bytes);
  ex.answers = string_list(obj.value("answers", json()), "answers");
  ex.all_classes = string_list(obj.value("all_classes", json()), "all_classes");
  auto len = obj.find("length");
  if (len != obj.end() && !len->is_null()) {
    HYPIC_REQUIRE(len->is_number_integer(), "field 'length' must be an integer");
    ex.length = len->get<int64_t>();
  }
  return ex;
}

Example hotpot_example(const json& obj) {
  HYPIC_REQUIRE(obj.is_object(), "expected a JSON object");
  Example ex;
  ex.dataset = "hotpotqa";
  ex.id = string_field(obj, "_id", true);
  ex.question = string_field(obj, "question", true);
  const std::string answer = string_field(obj, "answer", false);
  if (!answer.empty()) ex.answers.push_back(answer);
  auto ctx = obj.find("context");
  HYPIC_REQUIRE(ctx != obj.end() && ctx->is_array(), "missing list field 'context'");
  for (const auto& para : *ctx) {
    HYPIC_REQUIRE(para.is_array() && para.size() == 2 && para[0].is_string() && para[1].is_array(),
                  "each context entry must be [title, [sentences]]");
    std::string text = para[0].get<std::string>() + "\n";
    for (const auto& sentence : para[1]) {
      HYPIC_REQUIRE(sentence.is_string(), "sentences must be strings");
      text += sentence.get<std::string>();
    }
    ex.segments.push_back(std::move(text));
  }
  return ex;
}

std::string read_all(const std::string& path) {
  return read_regular_file(path, "dataset file");
}

}  // namespace

SplitRule parse_split_rule(const std::string& name) {
  if (name == "passages") return SplitRule::kPassages;
  if (name == "documents") return SplitRule::kDocuments;
  if (name == "examples") return SplitRule::kExamples;
  if (name == "chunks") return SplitRule::kChunks;
  if (name == "whole") return SplitRule::kWhole;
  throw Error("unknown segment split rule '" + name +
              "'; use passages, documents, examples, chunks or whole");
}

std::string split_rule_name(SplitRule rule) {
  switch (rule) {
    case SplitRule::kPassages:
      return "passages";
    case SplitRule::kDocuments:
      return "documents";
    case SplitRule::kExamples:
      return "examples";
    case SplitRule::kChunks:
      return "chunks";
    case SplitRule::kWhole:
      return "whole";
  }
  return "?";
}

std::vector<std::string> split_context(std::string_view context, SplitRule rule,
                                       size_t max_segment_bytes) {
  HYPIC_REQUIRE(max_segment_bytes >= 16, "the segment size limit must be at least 16 bytes");
  std::vector<std::string> out;
  switch (rule) {
    case SplitRule::kPassages:
      if (!split_at_markers(context, find_markers(context, passage_marker), false, out))
        push_segment(out, drop_one_newline(context));
      break;
    case SplitRule::kDocuments:
      if (split_at_markers(context, find_markers(context, passage_marker), false, out)) break;
      if (context.find("|||||") != std::string_view::npos)
        split_on(context, "|||||", out);
      else
        split_blank_lines(context, out);
      break;
    case SplitRule::kExamples:
      if (!split_at_markers(context, find_markers(context, example_marker), true, out))
        split_chunks(context, max_segment_bytes, out);
      break;
    case SplitRule::kChunks:
      split_chunks(context, max_segment_bytes, out);
      break;
    case SplitRule::kWhole:
      push_segment(out, context);
      break;
  }
  return out;
}

ReadResult read_longbench_jsonl(const std::string& path, const std::string& dataset, SplitRule rule,
                                const ReadOptions& options) {
  require_regular_file(path, "dataset file");
  std::ifstream in(path, std::ios::binary);
  HYPIC_REQUIRE(in.good(), "cannot open dataset file " + path);
  ReadResult result;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) continue;
    if (options.limit && result.examples.size() >= options.limit) break;
    std::string reason;
    try {
      result.examples.push_back(
          longbench_example(json::parse(line), dataset, rule, options, line_no));
      continue;
    } catch (const json::parse_error& e) {
      reason = std::string("not valid JSON (") + e.what() + ")";
    } catch (const json::exception& e) {
      reason = e.what();
    } catch (const Error& e) {
      reason = e.what();
    }
    if (!options.skip_malformed)
      throw Error(where(path, line_no) + reason +
                  "; fix the line or read with malformed lines skipped");
    result.skipped.push_back({line_no, reason});
  }
  if (!options.limit || result.examples.size() < options.limit)
    require_read_to_end(in, path);  // a read error is not the end of the dataset
  return result;
}

ReadResult read_hotpotqa_json(const std::string& path, const ReadOptions& options) {
  json all;
  try {
    all = json::parse(read_all(path));
  } catch (const json::parse_error& e) {
    throw Error(path + ": not valid JSON (" + e.what() + ")");
  }
  HYPIC_REQUIRE(all.is_array(), path + ": HotpotQA JSON must be a list of question objects");
  ReadResult result;
  for (size_t i = 0; i < all.size(); ++i) {
    if (options.limit && result.examples.size() >= options.limit) break;
    try {
      result.examples.push_back(hotpot_example(all[i]));
      continue;
    } catch (const std::exception& e) {
      const std::string reason = e.what();
      if (!options.skip_malformed)
        throw Error(path + ": record " + std::to_string(i + 1) + ": " + reason +
                    "; fix the record or read with malformed records skipped");
      result.skipped.push_back({i + 1, reason});
    }
  }
  return result;
}

ReadResult read_dataset(const std::string& path, const std::string& dataset, SplitRule rule,
                        const ReadOptions& options) {
  require_regular_file(path, "dataset file");  // a folder or FIFO is no dataset
  std::ifstream in(path, std::ios::binary);
  HYPIC_REQUIRE(in.good(), "cannot open dataset file " + path);
  char c = 0;
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  if (c == '[') return read_hotpotqa_json(path, options);
  return read_longbench_jsonl(path, dataset, rule, options);
}

}  // namespace hypic::eval
