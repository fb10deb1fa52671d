#include "eval/metrics.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <random>
#include <unordered_map>

#include "hypic/error.hpp"
#include "model/unicode.hpp"

namespace hypic::eval {
namespace {

// Python's string.punctuation.
bool is_ascii_punct(unsigned char c) {
  return c < 0x80 && c > 0x20 && c != 0x7F && std::strchr("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", c);
}

// Python re.sub(r"\b(a|an|the)\b", " ", text). A word character is what Python's \w is for
// str patterns: a letter, a number or "_"; PCRE2 evaluates the classes (UTF + UCP).
std::string remove_articles(const std::string& text) {
  struct Code {
    pcre2_code* code = nullptr;
    Code() {
      const char* pattern = R"((?<![\p{L}\p{N}_])(?:a|an|the)(?![\p{L}\p{N}_]))";
      int err = 0;
      PCRE2_SIZE off = 0;
      code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                           PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
    }
    ~Code() { pcre2_code_free(code); }
  };
  static const Code re;
  if (text.find('a') == std::string::npos && text.find("the") == std::string::npos) return text;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
      pcre2_match_data_create_from_pattern(re.code, nullptr), &pcre2_match_data_free);
  std::string out;
  out.reserve(text.size());
  size_t start = 0;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  while (start <= text.size()) {
    const int rc =
        pcre2_match(re.code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
    if (rc < 0) break;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
    out.append(text, start, ov[0] - start);
    out += ' ';
    start = ov[1];
  }
  if (start < text.size()) out.append(text, start, std::string::npos);
  return out;
}

// Python str.split() with no argument.
std::vector<std::string> python_split(std::string_view s) {
  std::vector<std::string> words;
  std::string cur;
  size_t pos = 0;
  char32_t cp = 0;
  while (pos < s.size()) {
    const size_t at = pos;
    unicode::next_code_point(s, pos, cp);
    if (unicode::is_python_space(cp)) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur.append(s.substr(at, pos - at));
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

std::string valid(std::string_view s) {
  return unicode::to_valid_utf8(s);
}

std::vector<std::string> normalized_tokens(std::string_view text) {
  return python_split(normalize_answer(text));
}

size_t lcs_length(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::vector<size_t> prev(b.size() + 1, 0), cur(b.size() + 1, 0);
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = a[i - 1] == b[j - 1] ? prev[j - 1] + 1 : std::max(prev[j], cur[j - 1]);
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string normalize_answer(std::string_view text) {
  const std::string lowered = unicode::python_lower(valid(text));
  std::string no_punct;
  no_punct.reserve(lowered.size());
  for (char c : lowered)
    if (!is_ascii_punct(static_cast<unsigned char>(c))) no_punct += c;
  const std::vector<std::string> words = python_split(remove_articles(no_punct));
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

double exact_match(std::string_view prediction, std::string_view gold) {
  return normalize_answer(prediction) == normalize_answer(gold) ? 1.0 : 0.0;
}

double token_f1(std::string_view prediction, std::string_view gold) {
  const auto p = normalized_tokens(prediction);
  const auto g = normalized_tokens(gold);
  std::unordered_map<std::string, long> counts;
  for (const auto& t : g) ++counts[t];
  long same = 0;
  for (const auto& t : p) {
    auto it = counts.find(t);
    if (it != counts.end() && it->second > 0) {
      --it->second;
      ++same;
    }
  }
  if (same == 0) return 0.0;
  const double precision = 1.0 * double(same) / double(p.size());
  const double recall = 1.0 * double(same) / double(g.size());
  return (2 * precision * recall) / (precision + recall);
}

std::vector<std::string> rouge_tokenize(std::string_view text) {
  const std::string lowered = unicode::python_lower(valid(text));
  std::vector<std::string> tokens;
  std::string cur;
  for (char c : lowered) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      cur += c;
    } else if (!cur.empty()) {
      tokens.push_back(std::move(cur));
      cur.clear();
    }
  }
  if (!cur.empty()) tokens.push_back(std::move(cur));
  return tokens;
}

RougeScore rouge_l(std::string_view target, std::string_view prediction) {
  const auto t = rouge_tokenize(target);
  const auto p = rouge_tokenize(prediction);
  RougeScore s;
  if (t.empty() || p.empty()) return s;
  const double lcs = double(lcs_length(t, p));
  s.precision = lcs / double(p.size());
  s.recall = lcs / double(t.size());
  s.fmeasure =
      s.precision + s.recall > 0 ? 2 * s.precision * s.recall / (s.precision + s.recall) : 0.0;
  return s;
}

double max_exact_match(std::string_view prediction, const std::vector<std::string>& golds) {
  double best = 0;
  for (const auto& g : golds) best = std::max(best, exact_match(prediction, g));
  return best;
}

double max_token_f1(std::string_view prediction, const std::vector<std::string>& golds) {
  double best = 0;
  for (const auto& g : golds) best = std::max(best, token_f1(prediction, g));
  return best;
}

double max_rouge_l(std::string_view prediction, const std::vector<std::string>& golds) {
  double best = 0;
  for (const auto& g : golds) best = std::max(best, rouge_l(g, prediction).fmeasure);
  return best;
}

std::string first_line(std::string_view prediction) {
  const size_t b = prediction.find_first_not_of('\n');
  if (b == std::string_view::npos) return {};
  const std::string_view rest = prediction.substr(b);
  return std::string(rest.substr(0, rest.find('\n')));
}

double score(const std::string& metric, std::string_view prediction,
             const std::vector<std::string>& golds) {
  if (metric == "qa_f1") return max_token_f1(prediction, golds);
  if (metric == "exact_match") return max_exact_match(prediction, golds);
  if (metric == "rouge_l") return max_rouge_l(prediction, golds);
  throw Error("unknown metric '" + metric + "'; use qa_f1, exact_match or rouge_l");
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

double percentile(std::vector<double> v, double pct) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const double pos = pct / 100.0 * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

Interval bootstrap_mean(const std::vector<double>& values, int resamples, double level,
                        uint64_t seed) {
  HYPIC_REQUIRE(resamples > 0 && level > 0 && level < 1,
                "bootstrap: resamples must be positive and level in (0, 1)");
  Interval out;
  if (values.empty()) return out;
  out.mean = mean(values);
  std::mt19937_64 rng(seed);
  const size_t n = values.size();
  std::vector<double> means(static_cast<size_t>(resamples));
  for (double& m : means) {
    double sum = 0;
    // rng() % n: the bias is below n / 2^64, far under the interval's own noise.
    for (size_t i = 0; i < n; ++i) sum += values[static_cast<size_t>(rng() % n)];
    m = sum / static_cast<double>(n);
  }
  out.lo = percentile(means, 100 * (1 - level) / 2);
  out.hi = percentile(std::move(means), 100 * (1 + level) / 2);
  return out;
}

}  // namespace hypic::eval
