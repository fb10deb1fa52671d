#include "eval/runner.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>

#include "eval/metrics.hpp"
#include "hypic/error.hpp"
#include "model/config.hpp"

namespace hypic::eval {
namespace {
using nlohmann::json;

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

}  // namespace

std::vector<EvalItem> make_items(const std::vector<Example>& examples, const PromptTemplate& tmpl,
                                 const model::Tokenizer& tok, int64_t context, int max_new_tokens,
                                 std::vector<std::string>& skipped) {
  std::vector<EvalItem> items;
  const std::vector<int32_t> prefix = tok.encode(tmpl.prefix, false);
  for (const Example& ex : examples) {
    EvalItem p{ex, {}};
    p.query.id = ex.id;
    p.query.prefix = prefix;
    int64_t n = static_cast<int64_t>(prefix.size());
    for (size_t i = 0; i < ex.segments.size(); ++i) {
      p.query.segments.push_back(tok.encode(render_segment(tmpl, i + 1, ex.segments[i]), false));
      n += static_cast<int64_t>(p.query.segments.back().size());
    }
    p.query.question = tok.encode(render_suffix(tmpl, ex.question), false);
    p.query.max_new_tokens = max_new_tokens;
    n += static_cast<int64_t>(p.query.question.size());
    if (p.query.segments.empty() || model::context_positions(n, max_new_tokens) > context) {
      skipped.push_back(ex.id + (p.query.segments.empty()
                                     ? " (no context segments)"
                                     : " (prompt and answer exceed the model's context)"));
      continue;
    }
    items.push_back(std::move(p));
  }
  return items;
}

bool is_qa_metric(const std::string& metric) {
  return metric != "rouge_l";
}

std::string metric_label(const std::string& metric) {
  return metric == "rouge_l" ? "ROUGE-L" : metric == "exact_match" ? "EM" : "F1";
}

ModeScorer::ModeScorer(pic::Mode mode, const PromptTemplate& tmpl)
    : mode_(mode),
      metric_(tmpl.metric),
      first_line_(tmpl.answer_first_line),
      qa_(is_qa_metric(tmpl.metric)) {}

json ModeScorer::add(const EvalItem& item, const pic::QueryResult& r, const std::string& text) {
  const std::string scored = first_line_ ? first_line(text) : text;
  const Example& ex = item.example;
  json line = {{"pred", text},
               {"answers", ex.answers},
               {"all_classes", ex.all_classes.empty() ? json(nullptr) : json(ex.all_classes)},
               {"length", ex.length},
               {"_id", ex.id},
               {"ttft_ms", r.times.ttft * 1e3},
               {"hits", r.hits_memory + r.hits_store},
               {"hits_memory", r.hits_memory},
               {"hits_store", r.hits_store},
               {"colds", r.cold},
               {"segments", r.segments},
               {"prompt_tokens", r.prompt_tokens}};
  const double s = eval::score(metric_, scored, ex.answers);
  line["score"] = s;
  scores_.push_back(s);
  if (qa_) {
    ems_.push_back(max_exact_match(scored, ex.answers));
    f1s_.push_back(max_token_f1(scored, ex.answers));
    line["em"] = ems_.back();
    line["f1"] = f1s_.back();
  }
  ttft_ms_.push_back(r.times.ttft * 1e3);
  hits_memory_ += r.hits_memory;
  hits_store_ += r.hits_store;
  colds_ += r.cold;
  return line;
}

double ModeScorer::score() const {
  return mean(scores_);
}
double ModeScorer::em() const {
  return mean(ems_);
}
double ModeScorer::f1() const {
  return mean(f1s_);
}

ModeComparison compare_modes(const std::vector<ModeScorer>& modes,
                             const std::vector<std::string>& predictions,
                             const std::string& metric) {
  HYPIC_REQUIRE(modes.size() == predictions.size(), "compare_modes: one predictions file per mode");
  const bool qa = is_qa_metric(metric);
  std::optional<double> full_score;
  for (const ModeScorer& r : modes)
    if (r.mode() == pic::Mode::Full) full_score = r.score();
  std::ostringstream table;
  table << "| mode | " << metric_label(metric) << " | Δ vs full |" << (qa ? " EM |" : "")
        << " TTFT p50 ms | TTFT p99 ms | hits (memory+store) | colds |\n";
  table << "|---|---:|---:|" << (qa ? "---:|" : "") << "---:|---:|---:|---:|\n";
  ModeComparison out{"", json::array()};
  for (size_t i = 0; i < modes.size(); ++i) {
    const ModeScorer& r = modes[i];
    const double p50 = percentile(r.ttft_ms(), 50), p99 = percentile(r.ttft_ms(), 99);
    const std::string delta = full_score ? fmt("%+.2f", 100 * (r.score() - *full_score)) : "n/a";
    table << "| " << pic::mode_name(r.mode()) << " | " << fmt("%.2f", 100 * r.score()) << " | "
          << delta << " |" << (qa ? " " + fmt("%.2f", 100 * r.em()) + " |" : "") << " "
          << fmt("%.1f", p50) << " | " << fmt("%.1f", p99) << " | "
          << r.hits_memory() + r.hits_store() << " (" << r.hits_memory() << "+" << r.hits_store()
          << ") | " << r.colds() << " |\n";
    json mj = {{"mode", pic::mode_name(r.mode())},
               {"score", r.score()},
               {"delta_vs_full", full_score ? json(r.score() - *full_score) : json(nullptr)},
               {"ttft_ms",
                {{"p50", p50},
                 {"p90", percentile(r.ttft_ms(), 90)},
                 {"p99", p99},
                 {"mean", mean(r.ttft_ms())}}},
               {"hits", {{"memory", r.hits_memory()}, {"store", r.hits_store()}}},
               {"colds", r.colds()},
               {"queries", r.ttft_ms().size()},
               {"predictions", predictions[i]}};
    if (qa) {
      mj["em"] = r.em();
      mj["f1"] = r.f1();
    }
    out.modes.push_back(mj);
  }
  out.table = table.str();
  return out;
}

}  // namespace hypic::eval
