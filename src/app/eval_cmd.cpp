// `hypic eval`: one dataset through every caching mode. The dataset's segments are warmed
// into a store once, then each mode answers every example; predictions are written in
// LongBench's pred-file layout (one folder per mode) and a table compares the modes:
// score, Δ against full, TTFT percentiles and cache hits.
//
// MPI: the engine is not distributed yet, so under mpirun only rank 0 works; the other
// ranks return at once (rank 0 says so on stderr).
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/io_util.hpp"
#include "app/pic_inputs.hpp"
#include "app/pic_report.hpp"
#include "common/error.hpp"
#include "eval/datasets.hpp"
#include "eval/metrics.hpp"
#include "eval/templates.hpp"
#include "pic/segment_entry.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct EvalArgs {
  std::string model, dataset, input, modes = "full,prefix,pic,pic-addition", out, junction = "8",
                                     store, templates = eval::kDefaultTemplatesPath, dtype = "bf16";
  size_t limit = 0;
  int max_new_tokens = 0;  // 0: the template's max_answer_tokens
  double memory_budget_mib = 1024;
};

std::vector<pic::Mode> parse_modes(const std::string& text) {
  std::vector<pic::Mode> modes;
  std::set<std::string> seen;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const pic::Mode m = pic::parse_mode(item);
    if (seen.insert(pic::mode_name(m)).second) modes.push_back(m);
  }
  require(!modes.empty(), "--modes lists no mode (e.g. full,prefix,pic,pic-addition)");
  return modes;
}

// One line on stderr, rewritten in place on a terminal, every ~2 s otherwise.
class Progress {
 public:
  explicit Progress(std::string label, size_t total)
      : label_(std::move(label)), total_(total), tty_(isatty(fileno(stderr)) != 0) {}
  void update(size_t done, bool final = false) {
    const auto now = Clock::now();
    const auto gap = tty_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(2000);
    if (!final && now - last_ < gap) return;
    last_ = now;
    const double dt = std::chrono::duration<double>(now - t0_).count();
    const double eta = done > 0 ? dt / static_cast<double>(done) * (total_ - done) : 0.0;
    std::fprintf(stderr, "%seval: %s %zu/%zu, %.1f s, ETA %.0f s%s", tty_ ? "\r" : "",
                 label_.c_str(), done, total_, dt, eta, tty_ && !final ? "" : "\n");
    std::fflush(stderr);
  }

 private:
  std::string label_;
  size_t total_;
  bool tty_;
  Clock::time_point t0_ = Clock::now();
  Clock::time_point last_ = Clock::now();
};

struct Prepared {
  eval::Example example;
  pic::Query query;
};

struct ModeResult {
  pic::Mode mode;
  std::string predictions;
  double score = 0, em = 0, f1 = 0;
  std::vector<double> ttft_ms;
  int64_t hits_memory = 0, hits_store = 0, colds = 0;
};

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0.0 : s / static_cast<double>(v.size());
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

int run_eval(const EvalArgs& a) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank != 0) return 0;
  if (size > 1)
    std::fprintf(stderr,
                 "eval: %d ranks started; eval runs on rank 0 only for now (ranks 1-%d stay "
                 "idle until the distributed engine lands)\n",
                 size, size - 1);

  // Everything cheap is checked before the model is loaded.
  const std::vector<pic::Mode> modes = parse_modes(a.modes);
  const pic::JunctionSpec junction = pic::JunctionSpec::parse(a.junction);
  const eval::TemplateSet templates = eval::TemplateSet::load(a.templates);
  const eval::PromptTemplate& tmpl = templates.get(a.dataset);
  require(a.max_new_tokens >= 0, "--max-new-tokens must be at least 0");
  eval::ReadOptions ro;
  ro.limit = a.limit;
  const eval::ReadResult data = eval::read_dataset(a.input, a.dataset, tmpl.split, ro);
  require(!data.examples.empty(), a.input + ": no examples");
  const bool qa = tmpl.metric != "rouge_l";
  const int max_new = a.max_new_tokens > 0 ? a.max_new_tokens : tmpl.max_answer_tokens;

  LoadedPicModel m = load_pic_model(a.model);
  const model::ModelConfig& cfg = m.model->config();
  std::vector<Prepared> items;
  int too_long = 0;
  const std::vector<int32_t> prefix = m.tokenizer.encode(tmpl.prefix, false);
  for (const eval::Example& ex : data.examples) {
    Prepared p{ex, {}};
    p.query.id = ex.id;
    p.query.prefix = prefix;
    int64_t n = static_cast<int64_t>(prefix.size());
    for (size_t i = 0; i < ex.segments.size(); ++i) {
      p.query.segments.push_back(
          m.tokenizer.encode(eval::render_segment(tmpl, i + 1, ex.segments[i]), false));
      n += static_cast<int64_t>(p.query.segments.back().size());
    }
    p.query.question = m.tokenizer.encode(eval::render_suffix(tmpl, ex.question), false);
    p.query.max_new_tokens = max_new;
    n += static_cast<int64_t>(p.query.question.size()) + max_new;
    if (p.query.segments.empty() || n > cfg.max_position_embeddings) {
      ++too_long;
      std::fprintf(stderr, "eval: skipping %s (%s)\n", ex.id.c_str(),
                   p.query.segments.empty() ? "no context segments"
                                            : "prompt and answer exceed the model's context");
      continue;
    }
    items.push_back(std::move(p));
  }
  require(!items.empty(), a.input + ": no example fits the model");

  const std::string out = a.out;
  std::filesystem::create_directories(out);
  const std::string store_path = a.store.empty() ? out + "/store.h5" : a.store;
  bool any_entries = false;
  for (pic::Mode mo : modes) any_entries = any_entries || pic::uses_entries(mo);

  // Warm-up: every distinct segment once into the store.
  std::optional<store::SegmentStore> st;
  json warm = nullptr;
  if (any_entries) {
    st = open_store_for_writing(store_path, m.fingerprint, junction.store_code(),
                                store::parse_dtype(a.dtype));
    std::vector<const std::vector<int32_t>*> segs;
    for (const Prepared& p : items)
      for (const auto& s : p.query.segments) segs.push_back(&s);
    size_t computed = 0, present = 0, done = 0;
    Progress bar("warm-up", segs.size());
    const auto t0 = Clock::now();
    for (const auto* s : segs) {
      const int w = junction.tokens_for(static_cast<int64_t>(s->size()));
      const std::string key = store::entry_key(m.fingerprint, *s, w);
      if (!st->contains(key) &&
          st->put(key, pic::to_store_entry(pic::compute_entry(*m.model, *s, w))))
        ++computed;
      else
        ++present;
      bar.update(++done);
    }
    bar.update(done, true);
    warm = {{"segments", segs.size()},
            {"computed", computed},
            {"already_stored", present},
            {"seconds", std::chrono::duration<double>(Clock::now() - t0).count()},
            {"store", store_path}};
  }

  std::vector<ModeResult> results;
  for (pic::Mode mode : modes) {
    pic::EngineOptions eo;
    eo.mode = mode;
    eo.junction = junction;
    eo.memory_budget_bytes = static_cast<size_t>(a.memory_budget_mib * 1048576.0);
    pic::Engine engine(*m.model, m.fingerprint, eo, pic::uses_entries(mode) && st ? &*st : nullptr);
    const std::string dir = out + "/" + pic::mode_name(mode);
    std::filesystem::create_directories(dir);
    ModeResult mr{mode, dir + "/" + a.dataset + ".jsonl", 0, 0, 0, {}, 0, 0, 0};
    std::ofstream pred(mr.predictions);
    require(pred.good(), "cannot write " + mr.predictions);
    RunSummary summary(mode, junction, eo.memory_budget_bytes);
    std::vector<double> scores, ems, f1s;
    Progress bar(pic::mode_name(mode), items.size());
    const auto t0 = Clock::now();
    size_t done = 0;
    for (const Prepared& p : items) {
      const pic::QueryResult r = engine.run(p.query);
      std::string text = m.tokenizer.decode(r.answer, true);
      const std::string scored = tmpl.answer_first_line ? eval::first_line(text) : text;
      const eval::Example& ex = p.example;
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
      const double s = eval::score(tmpl.metric, scored, ex.answers);
      line["score"] = s;
      scores.push_back(s);
      if (qa) {
        ems.push_back(eval::max_exact_match(scored, ex.answers));
        f1s.push_back(eval::max_token_f1(scored, ex.answers));
        line["em"] = ems.back();
        line["f1"] = f1s.back();
      }
      pred << line.dump() << "\n";
      summary.add(r, std::nullopt);
      mr.ttft_ms.push_back(r.times.ttft * 1e3);
      mr.hits_memory += r.hits_memory;
      mr.hits_store += r.hits_store;
      mr.colds += r.cold;
      bar.update(++done);
    }
    bar.update(done, true);
    require(pred.good(), "writing " + mr.predictions + " failed");
    summary.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    summary.memory_bytes = engine.memory_bytes();
    summary.memory_evictions = engine.memory_evictions();
    write_text_file(dir + "/metrics.json", summary.metrics_json().dump(2) + "\n");
    write_text_file(dir + "/timings.csv", summary.timings_csv());
    mr.score = mean(scores);
    mr.em = mean(ems);
    mr.f1 = mean(f1s);
    results.push_back(std::move(mr));
  }
  if (st) st->close();

  // The table and summary.json.
  std::optional<double> full_score;
  for (const ModeResult& r : results)
    if (r.mode == pic::Mode::Full) full_score = r.score;
  const std::string metric_label = tmpl.metric == "rouge_l"       ? "ROUGE-L"
                                   : tmpl.metric == "exact_match" ? "EM"
                                                                  : "F1";
  std::ostringstream table;
  table << "| mode | " << metric_label << " | Δ vs full |" << (qa ? " EM |" : "")
        << " TTFT p50 ms | TTFT p99 ms | hits (memory+store) | colds |\n";
  table << "|---|---:|---:|" << (qa ? "---:|" : "") << "---:|---:|---:|---:|\n";
  json modes_json = json::array();
  for (const ModeResult& r : results) {
    const double p50 = percentile(r.ttft_ms, 50), p99 = percentile(r.ttft_ms, 99);
    const std::string delta = full_score ? fmt("%+.2f", 100 * (r.score - *full_score)) : "n/a";
    table << "| " << pic::mode_name(r.mode) << " | " << fmt("%.2f", 100 * r.score) << " | " << delta
          << " |" << (qa ? " " + fmt("%.2f", 100 * r.em) + " |" : "") << " " << fmt("%.1f", p50)
          << " | " << fmt("%.1f", p99) << " | " << r.hits_memory + r.hits_store << " ("
          << r.hits_memory << "+" << r.hits_store << ") | " << r.colds << " |\n";
    json mj = {{"mode", pic::mode_name(r.mode)},
               {"score", r.score},
               {"delta_vs_full", full_score ? json(r.score - *full_score) : json(nullptr)},
               {"ttft_ms",
                {{"p50", p50},
                 {"p90", percentile(r.ttft_ms, 90)},
                 {"p99", p99},
                 {"mean", mean(r.ttft_ms)}}},
               {"hits", {{"memory", r.hits_memory}, {"store", r.hits_store}}},
               {"colds", r.colds},
               {"queries", r.ttft_ms.size()},
               {"predictions", r.predictions}};
    if (qa) {
      mj["em"] = r.em;
      mj["f1"] = r.f1;
    }
    modes_json.push_back(mj);
  }
  const json summary = {{"dataset", a.dataset},
                        {"input", a.input},
                        {"model", a.model},
                        {"metric", tmpl.metric},
                        {"metric_label", metric_label},
                        {"scores_scale", "0-1 (the table shows ×100)"},
                        {"examples", items.size()},
                        {"skipped", too_long},
                        {"junction", junction.to_string()},
                        {"max_new_tokens", max_new},
                        {"warmup", warm},
                        {"modes", modes_json}};
  write_text_file(out + "/summary.json", summary.dump(2) + "\n");
  write_text_file(out + "/table.md", table.str());
  std::printf("%s: %zu examples, metric %s (scores ×100), junction %s\n", a.dataset.c_str(),
              items.size(), metric_label.c_str(), junction.to_string().c_str());
  std::printf("%s", table.str().c_str());
  std::printf("wrote %s/table.md, summary.json and <mode>/%s.jsonl\n", out.c_str(),
              a.dataset.c_str());
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* sub = app.add_subcommand("eval", "Score a dataset in every caching mode");
  auto a = std::make_shared<EvalArgs>();
  sub->add_option("--model", a->model, "Hugging Face model folder")->required();
  sub->add_option("--dataset", a->dataset, "dataset name (template), e.g. hotpotqa")->required();
  sub->add_option("--input", a->input, "LongBench JSONL or HotpotQA JSON file")->required();
  sub->add_option("--modes", a->modes, "comma-separated modes")->capture_default_str();
  sub->add_option("--out", a->out, "output folder")->required();
  sub->add_option("--limit", a->limit, "use at most this many examples (0: all)")
      ->check(non_negative_count());
  sub->add_option("--junction", a->junction, "junction window: tokens, or a share in (0,1]")
      ->capture_default_str();
  sub->add_option("--store", a->store, "segment store (default OUT/store.h5)");
  sub->add_option("--templates", a->templates, "prompt templates file")->capture_default_str();
  sub->add_option("--max-new-tokens", a->max_new_tokens,
                  "answer length (0: the template's max_answer_tokens)");
  sub->add_option("--memory-budget", a->memory_budget_mib, "MiB of RAM for the memory tier")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype, "element type of a store created here")
      ->capture_default_str();
  on_run(sub, [a] { return run_eval(*a); });
}

}  // namespace hypic::app
