#include "eval/runner.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "common/files.hpp"
#include "eval/metrics.hpp"
#include "hypic/error.hpp"
#include "model/config.hpp"
#include "pic/fidelity.hpp"

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
      for (const std::string& piece : render_segment_pieces(tmpl, i + 1, ex.segments[i])) {
        p.query.segments.push_back(tok.encode(piece, false));
        n += static_cast<int64_t>(p.query.segments.back().size());
      }
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

FullReference read_full_reference(const std::string& run_dir, const std::string& dataset) {
  require_plain_name(dataset, "dataset");
  const std::string preds = run_dir + "/full/" + dataset + ".jsonl";
  if (std::filesystem::exists(preds)) require_regular_file(preds, "reference");
  std::ifstream in(preds);
  HYPIC_REQUIRE(in.good(), "reference " + preds +
                               " cannot be read (a `hypic eval` run folder with the full mode)");
  FullReference ref;
  std::vector<std::string> order;
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    json j;
    try {
      j = json::parse(line);
      ref.scores[j.at("_id").get<std::string>()] = j.at("score").get<double>();
      order.push_back(j.at("_id").get<std::string>());
    } catch (const json::exception& e) {
      throw Error(preds + ":" + std::to_string(n) + ": not a prediction line (" + e.what() + ")");
    }
  }
  require_read_to_end(in, preds);
  HYPIC_REQUIRE(!order.empty(), "reference " + preds + " has no predictions");
  const std::string logits = run_dir + "/full/first_token_logits.f32";
  std::ifstream lf(logits, std::ios::binary | std::ios::ate);
  if (!lf.good()) return ref;  // scores only: no KL
  const auto bytes = static_cast<size_t>(lf.tellg());
  const size_t row = order.empty() ? 0 : bytes / sizeof(float) / order.size();
  HYPIC_REQUIRE(row > 0 && row * order.size() * sizeof(float) == bytes,
                logits + ": " + std::to_string(bytes) + " bytes is not " +
                    std::to_string(order.size()) + " rows of float32 logits");
  lf.seekg(0);
  for (const std::string& id : order) {
    std::vector<float> v(row);
    lf.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(row * sizeof(float)));
    HYPIC_REQUIRE(lf.good(), logits + ": read failed");
    ref.first_logits[id] = std::move(v);
  }
  return ref;
}

void write_first_token_logits(const std::string& path, const FullReference& ref,
                              const std::vector<std::string>& ids) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  HYPIC_REQUIRE(out.good(), "cannot write " + path);
  size_t row = 0;
  for (const std::string& id : ids) {
    const auto it = ref.first_logits.find(id);
    HYPIC_REQUIRE(it != ref.first_logits.end() && !it->second.empty() &&
                      (row == 0 || it->second.size() == row),
                  path + ": every example needs logits of the same vocabulary");
    row = it->second.size();
    out.write(reinterpret_cast<const char*>(it->second.data()),
              static_cast<std::streamsize>(row * sizeof(float)));
  }
  HYPIC_REQUIRE(out.good(), "writing " + path + " failed");
}

ModeScorer::ModeScorer(pic::Mode mode, const PromptTemplate& tmpl, const FullReference* reference)
    : mode_(mode),
      metric_(tmpl.metric),
      first_line_(tmpl.answer_first_line),
      qa_(is_qa_metric(tmpl.metric)),
      ref_(reference),
      layout_(tmpl) {}

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
  if (ref_ != nullptr) {
    const auto sc = ref_->scores.find(ex.id);
    if (sc != ref_->scores.end()) {
      deltas_.push_back(s - sc->second);
      line["delta_vs_full"] = deltas_.back();
    }
    const auto lg = ref_->first_logits.find(ex.id);
    if (lg != ref_->first_logits.end() && lg->second.size() == r.first_logits.size() &&
        !r.first_logits.empty()) {
      kls_.push_back(pic::kl_divergence_logits(lg->second.data(), r.first_logits.data(),
                                               static_cast<int64_t>(r.first_logits.size())));
      line["first_token_kl"] = kls_.back();
    }
  }
  std::map<int, std::pair<double, int>> per_layer;
  for (const pic::StateShare& sh : r.state_shares) {
    if (is_header_segment(layout_, static_cast<size_t>(sh.segment))) continue;
    per_layer[sh.layer].first += sh.ratio;
    ++per_layer[sh.layer].second;
  }
  if (!per_layer.empty()) {
    json sj = json::object();
    for (const auto& [layer, sc] : per_layer) {
      const double m = sc.first / sc.second;
      share_sum_[layer] += m;
      sj[std::to_string(layer)] = m;
    }
    ++state_examples_;
    line["state_contribution"] = sj;
  }
  ttft_ms_.push_back(r.times.ttft * 1e3);
  hits_memory_ += r.hits_memory;
  hits_store_ += r.hits_store;
  colds_ += r.cold;
  return line;
}

std::map<int, double> ModeScorer::state_contribution() const {
  std::map<int, double> out;
  for (const auto& [layer, sum] : share_sum_)
    out[layer] = sum / static_cast<double>(state_examples_);
  return out;
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
        << " TTFT p50 ms | TTFT p99 ms | hits (memory+store) | colds | Δ 95 % CI |"
        << " first-token KL | state contrib. |\n";
  table << "|---|---:|---:|" << (qa ? "---:|" : "") << "---:|---:|---:|---:|---:|---:|---:|\n";
  ModeComparison out{"", json::array()};
  for (size_t i = 0; i < modes.size(); ++i) {
    const ModeScorer& r = modes[i];
    const double p50 = percentile(r.ttft_ms(), 50), p99 = percentile(r.ttft_ms(), 99);
    std::optional<double> d;
    if (full_score)
      d = r.score() - *full_score;
    else if (!r.deltas().empty())
      d = mean(r.deltas());
    const std::string delta = d ? fmt("%+.2f", 100 * *d) : "n/a";
    const bool is_full = r.mode() == pic::Mode::Full;
    const Interval ci = bootstrap_mean(r.deltas());
    const bool has_ci = !is_full && !r.deltas().empty();
    const std::string ci_text =
        is_full  ? "—"
        : has_ci ? "[" + fmt("%+.2f", 100 * ci.lo) + ", " + fmt("%+.2f", 100 * ci.hi) + "]"
                 : "n/a";
    const bool has_kl = !r.first_token_kl().empty();
    const std::string kl_text = is_full  ? "—"
                                : has_kl ? fmt("%.3g", mean(r.first_token_kl()))
                                         : "n/a";
    const std::map<int, double> shares = r.state_contribution();
    double share_mean = 0;
    for (const auto& kv : shares) share_mean += kv.second / static_cast<double>(shares.size());
    const std::string share_text = shares.empty() ? "—" : fmt("%.3g", share_mean);
    table << "| " << pic::mode_name(r.mode()) << " | " << fmt("%.2f", 100 * r.score()) << " | "
          << delta << " |" << (qa ? " " + fmt("%.2f", 100 * r.em()) + " |" : "") << " "
          << fmt("%.1f", p50) << " | " << fmt("%.1f", p99) << " | "
          << r.hits_memory() + r.hits_store() << " (" << r.hits_memory() << "+" << r.hits_store()
          << ") | " << r.colds() << " | " << ci_text << " | " << kl_text << " | " << share_text
          << " |\n";
    json mj = {{"mode", pic::mode_name(r.mode())},
               {"score", r.score()},
               {"delta_vs_full", d ? json(*d) : json(nullptr)},
               {"delta_ci95", has_ci ? json::array({ci.lo, ci.hi}) : json(nullptr)},
               {"first_token_kl", has_kl ? json{{"mean", mean(r.first_token_kl())},
                                                {"p50", percentile(r.first_token_kl(), 50)},
                                                {"max", percentile(r.first_token_kl(), 100)},
                                                {"examples", r.first_token_kl().size()}}
                                         : json(nullptr)},
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
    if (!shares.empty()) {
      json layers = json::array();
      for (const auto& [layer, m] : shares)
        layers.push_back({{"layer", layer}, {"mean", m}, {"examples", r.state_examples()}});
      mj["state_contribution"] = {{"mean", share_mean}, {"layers", layers}};
    } else {
      mj["state_contribution"] = nullptr;
    }
    out.modes.push_back(mj);
  }
  out.table = table.str();
  return out;
}

std::string merge_tables(const std::vector<json>& summaries) {
  std::ostringstream t;
  t << "| dataset | mode | metric | score | EM | Δ vs full | Δ 95 % CI | first-token KL |"
       " TTFT p50 ms | state contrib. | examples |\n";
  t << "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const json& s : summaries) {
    try {
      const std::string junction = s.at("junction").get<std::string>();
      for (const json& m : s.at("modes")) {
        const std::string mode = m.at("mode").get<std::string>();
        const bool cached = mode == "pic" || mode == "pic-addition";
        const auto num = [&](const json& v, const char* f, double scale) {
          return v.is_null() ? std::string("n/a") : fmt(f, scale * v.get<double>());
        };
        std::string ci = mode == "full" ? "—" : "n/a";
        if (m.contains("delta_ci95") && !m["delta_ci95"].is_null())
          ci = "[" + fmt("%+.2f", 100 * m["delta_ci95"][0].get<double>()) + ", " +
               fmt("%+.2f", 100 * m["delta_ci95"][1].get<double>()) + "]";
        std::string kl = mode == "full" ? "—" : "n/a";
        if (m.contains("first_token_kl") && !m["first_token_kl"].is_null())
          kl = fmt("%.3g", m["first_token_kl"]["mean"].get<double>());
        std::string share = "—";
        if (m.contains("state_contribution") && !m["state_contribution"].is_null())
          share = fmt("%.3g", m["state_contribution"]["mean"].get<double>());
        t << "| " << s.at("dataset").get<std::string>() << " | " << mode
          << (cached ? " (W=" + junction + ")" : "") << " | "
          << s.at("metric_label").get<std::string>() << " | " << num(m.at("score"), "%.2f", 100)
          << " | " << (m.contains("em") ? num(m["em"], "%.2f", 100) : "—") << " | "
          << num(m.value("delta_vs_full", json()), "%+.2f", 100) << " | " << ci << " | " << kl
          << " | " << fmt("%.1f", m.at("ttft_ms").at("p50").get<double>()) << " | " << share
          << " | " << m.at("queries").get<int64_t>() << " |\n";
      }
    } catch (const json::exception& e) {
      throw Error(std::string("eval-table: not a `hypic eval` summary.json (") + e.what() + ")");
    }
  }
  return t.str();
}

}  // namespace hypic::eval
