#include "app/pic_report.hpp"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "eval/metrics.hpp"
#include "pic/fidelity.hpp"

namespace hypic::app {
namespace {
using eval::mean;
using eval::percentile;
using nlohmann::json;

// The phases in the order of timings.csv.
struct Phase {
  const char* name;
  double pic::PhaseTimes::*field;
};
const Phase kPhases[] = {
    {"store_read", &pic::PhaseTimes::store_read},
    {"cold_fill", &pic::PhaseTimes::cold_fill},
    {"composition", &pic::PhaseTimes::composition},
    {"junction", &pic::PhaseTimes::junction},
    {"prefix_restore", &pic::PhaseTimes::prefix_restore},
    {"prefill", &pic::PhaseTimes::prefill},
    {"question", &pic::PhaseTimes::question},
    {"snapshot_save", &pic::PhaseTimes::snapshot_save},
    {"decode", &pic::PhaseTimes::decode},
};

}  // namespace

Fidelity compare(const pic::QueryResult& full, const pic::QueryResult& mode) {
  Fidelity f;
  const pic::TokenAgreement a = pic::token_agreement(full.answer, mode.answer);
  f.agreement = a.prefix_fraction;
  f.exact = a.exact;
  if (!full.first_logits.empty() && full.first_logits.size() == mode.first_logits.size())
    f.kl_first_token = pic::kl_divergence_logits(full.first_logits.data(), mode.first_logits.data(),
                                                 static_cast<int64_t>(full.first_logits.size()));
  if (!full.last_hidden.empty() && full.last_hidden.size() == mode.last_hidden.size())
    f.hidden_rel_error =
        pic::relative_l2(mode.last_hidden.data(), full.last_hidden.data(), full.last_hidden.size());
  return f;
}

json fidelity_json(const Fidelity& f) {
  return {{"agreement", f.agreement},
          {"exact", f.exact},
          {"kl_first_token", f.kl_first_token},
          {"hidden_rel_error", f.hidden_rel_error}};
}

json prediction_json(const pic::QueryResult& r) {
  return {{"id", r.id},
          {"answer_tokens", r.answer},
          {"ttft_ms", r.times.ttft * 1e3},
          {"segments", r.segments},
          {"hits", {{"memory", r.hits_memory}, {"store", r.hits_store}}},
          {"cold", r.cold},
          {"damaged", r.damaged},
          {"prefix_units_reused", r.prefix_units_reused},
          {"prompt_tokens", r.prompt_tokens},
          {"tokens_recomputed", r.tokens_recomputed}};
}

RunSummary::RunSummary(pic::Mode mode, pic::JunctionSpec junction, size_t memory_budget_bytes)
    : mode_(mode), junction_(junction), budget_(memory_budget_bytes) {}

void RunSummary::add(const pic::QueryResult& r, const std::optional<Fidelity>& f,
                     std::optional<double> f1) {
  pic::QueryResult slim = r;
  slim.first_logits.clear();
  slim.first_logits.shrink_to_fit();
  slim.last_hidden.clear();
  slim.last_hidden.shrink_to_fit();
  results_.push_back(std::move(slim));
  if (f) fidelity_.push_back(*f);
  if (f1) f1_.push_back(*f1);
}

std::vector<double> RunSummary::ttft_ms() const {
  std::vector<double> v;
  for (const auto& r : results_) v.push_back(r.times.ttft * 1e3);
  return v;
}

json RunSummary::metrics_json() const {
  const std::vector<double> ttft = ttft_ms();
  int64_t segments = 0, hm = 0, hs = 0, cold = 0, damaged = 0, recomputed = 0, prompt = 0,
          answer_tokens = 0, hits_by_workers = 0;
  uint64_t hit_bytes_from_workers = 0;
  double ttft_s = 0, decode_s = 0;
  json phases = json::object();
  for (const Phase& p : kPhases) {
    std::vector<double> v;
    for (const auto& r : results_) v.push_back(r.times.*p.field * 1e3);
    phases[p.name] = mean(v);
  }
  for (const auto& r : results_) {
    segments += r.segments;
    hm += r.hits_memory;
    hs += r.hits_store;
    hits_by_workers += r.hits_read_by_workers;
    hit_bytes_from_workers += r.hit_bytes_from_workers;
    cold += r.cold;
    damaged += r.damaged;
    recomputed += r.tokens_recomputed;
    prompt += r.prompt_tokens;
    answer_tokens += static_cast<int64_t>(r.answer.size());
    ttft_s += r.times.ttft;
    decode_s += r.times.decode;
  }
  json m = {{"mode", pic::mode_name(mode_)},
            {"device", device},
            {"entry_path", entry_path},
            {"entry_path_reason", entry_path_reason},
            {"junction", junction_.to_string()},
            {"memory_budget_mib", budget_ / 1048576.0},
            {"queries", results_.size()},
            {"skipped_lines", skipped_lines},
            {"segments", segments},
            {"hits", {{"memory", hm}, {"store", hs}}},
            {"hits_read_by_workers", hits_by_workers},
            {"hit_bytes_from_workers", hit_bytes_from_workers},
            {"cold", cold},
            {"damaged", damaged},
            {"prompt_tokens", prompt},
            {"tokens_recomputed", recomputed},
            {"ttft_ms",
             {{"p50", percentile(ttft, 50)},
              {"p90", percentile(ttft, 90)},
              {"p99", percentile(ttft, 99)},
              {"mean", mean(ttft)}}},
            {"phase_ms_mean", phases},
            {"prompt_tokens_per_s", ttft_s > 0 ? prompt / ttft_s : 0.0},
            {"decode_tokens_per_s", decode_s > 0 ? answer_tokens / decode_s : 0.0},
            {"memory_tier_bytes", memory_bytes},
            {"memory_tier_evictions", memory_evictions},
            {"wall_seconds", wall_seconds}};
  if (!fidelity_.empty()) {
    std::vector<double> agree, exact, kl, rel;
    for (const Fidelity& f : fidelity_) {
      agree.push_back(f.agreement);
      exact.push_back(f.exact ? 1.0 : 0.0);
      kl.push_back(f.kl_first_token);
      rel.push_back(f.hidden_rel_error);
    }
    m["compare_full"] = {{"queries", fidelity_.size()},
                         {"agreement_mean", mean(agree)},
                         {"exact_match_rate", mean(exact)},
                         {"kl_first_token_mean", mean(kl)},
                         {"hidden_rel_error_mean", mean(rel)}};
  }
  if (!f1_.empty()) m["answer_f1_mean"] = mean(f1_);
  return m;
}

std::string RunSummary::timings_csv() const {
  std::ostringstream out;
  out << "id,ttft_ms";
  for (const Phase& p : kPhases) out << "," << p.name << "_ms";
  out << "\n";
  char buf[32];
  for (const auto& r : results_) {
    std::string id = r.id;  // CSV-quote ids that need it
    if (id.find_first_of(",\"\n") != std::string::npos) {
      std::string q = "\"";
      for (char c : id) q += c == '"' ? std::string("\"\"") : std::string(1, c);
      id = q + "\"";
    }
    out << id;
    std::snprintf(buf, sizeof buf, ",%.3f", r.times.ttft * 1e3);
    out << buf;
    for (const Phase& p : kPhases) {
      std::snprintf(buf, sizeof buf, ",%.3f", r.times.*p.field * 1e3);
      out << buf;
    }
    out << "\n";
  }
  return out.str();
}

std::string RunSummary::one_line() const {
  const json m = metrics_json();
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: %zu queries, ttft p50 %.1f ms p99 %.1f ms, hits memory %lld store %lld, "
                "cold %lld, tokens recomputed %lld of %lld",
                pic::mode_name(mode_), results_.size(), m["ttft_ms"]["p50"].get<double>(),
                m["ttft_ms"]["p99"].get<double>(), m["hits"]["memory"].get<long long>(),
                m["hits"]["store"].get<long long>(), m["cold"].get<long long>(),
                m["tokens_recomputed"].get<long long>(), m["prompt_tokens"].get<long long>());
  std::string s = buf;
  if (m.contains("compare_full")) {
    std::snprintf(buf, sizeof buf,
                  "; vs full: agreement %.3f, exact %.2f, KL %.3g, hidden rel. error %.3g",
                  m["compare_full"]["agreement_mean"].get<double>(),
                  m["compare_full"]["exact_match_rate"].get<double>(),
                  m["compare_full"]["kl_first_token_mean"].get<double>(),
                  m["compare_full"]["hidden_rel_error_mean"].get<double>());
    s += buf;
  }
  return s;
}

}  // namespace hypic::app
