// `hypic eval`: one dataset through every caching mode. The dataset's segments are warmed
// into a store once, then each mode answers every example; predictions are written in
// LongBench's pred-file layout (one folder per mode) and a table compares the modes:
// score, Δ against full, TTFT percentiles and cache hits.
//
// MPI: as `hypic serve`. Under mpirun, rank 0 reads the dataset, writes the store and composes;
// ranks 1 … N−1 are scatter workers: they compute the warm-up's entries, then any cold segment
// of the modes' queries (cluster/distributed.hpp). Predictions do not depend on N.
#include <unistd.h>

#include <algorithm>
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
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "app/pic_inputs.hpp"
#include "app/pic_report.hpp"
#include "cluster/distributed.hpp"
#include "cluster/world.hpp"
#include "common/files.hpp"
#include "common/units.hpp"
#include "eval/datasets.hpp"
#include "eval/metrics.hpp"
#include "eval/runner.hpp"
#include "eval/templates.hpp"
#include "hypic/error.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {
using nlohmann::json;
using Clock = std::chrono::steady_clock;

struct EvalArgs {
  std::string model, dataset, input, modes = "full,prefix,pic,pic-addition", out, junction = "8",
                                     store, templates = eval::kDefaultTemplatesPath, dtype = "bf16",
                                     device, reference, entry_tolerance = "auto";
  size_t limit = 0;
  int max_new_tokens = 0;    // 0: the template's max_answer_tokens
  int no_repeat_ngram = -1;  // -1: the template's no_repeat_ngram
  double memory_budget_mib = 1024;
  int ranks = 0;
  bool byte_tokenizer = false;
};

std::vector<pic::Mode> parse_modes(const std::string& text) {
  std::vector<pic::Mode> modes;
  std::set<std::string> seen;
  for (const std::string& item : split_list(text)) {
    const pic::Mode m = pic::parse_mode(item);
    if (seen.insert(pic::mode_name(m)).second) modes.push_back(m);
  }
  HYPIC_REQUIRE(!modes.empty(), "--modes lists no mode (e.g. full,prefix,pic,pic-addition)");
  // Full runs first: the others are compared with its answers and first-token logits.
  std::stable_partition(modes.begin(), modes.end(),
                        [](pic::Mode m) { return m == pic::Mode::Full; });
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

// What the driver (rank 0) holds through a run.
struct EvalRun {
  explicit EvalRun(const EvalArgs& args)
      : a(args), modes(parse_modes(args.modes)), junction(pic::JunctionSpec::parse(args.junction)) {
    require_plain_name(a.dataset, "--dataset");  // OUT/<mode>/<dataset>.jsonl stays in OUT
    mib_to_bytes(a.memory_budget_mib, "--memory-budget");
    pic::parse_entry_tolerance(a.entry_tolerance, DType::BF16);  // before anything loads
    for (pic::Mode mo : modes) any_entries = any_entries || pic::uses_entries(mo);
  }
  const EvalArgs& a;
  std::vector<pic::Mode> modes;
  pic::JunctionSpec junction;
  bool any_entries = false;
  MPI_Comm comm = MPI_COMM_NULL;
  int world_size = 1;
  cluster::EntryPathChoice entry_path;  // how entries go between ranks (bind_rank_gpu)
  kernels::DeviceLink* link = nullptr;  // the NCCL path's link (bind_rank_gpu)
  const eval::PromptTemplate* tmpl = nullptr;
  int max_new = 0;
  int no_repeat_ngram = 0;
  std::optional<LoadedPicModel> m;  // loaded once the inputs are checked
  std::vector<eval::EvalItem> items;
  size_t skipped = 0;
  std::string store_path;
  std::optional<store::SegmentStore> st;
  std::unique_ptr<cluster::RemoteColdSource> cold;
  json warm = nullptr;
  eval::FullReference reference;  // full's answers: this run's full mode, or --reference
};

// The dataset as queries; examples that do not fit are named on stderr and left out.
void prepare(EvalRun& run, const eval::TemplateSet& templates) {
  const EvalArgs& a = run.a;
  run.tmpl = &templates.get(a.dataset);
  HYPIC_REQUIRE(a.max_new_tokens >= 0, "--max-new-tokens must be at least 0");
  HYPIC_REQUIRE(a.no_repeat_ngram >= -1,
                "--no-repeat-ngram must be 0 (off), a size, or -1 (the template's)");
  eval::ReadOptions ro;
  ro.limit = a.limit;
  const eval::ReadResult data = eval::read_dataset(a.input, a.dataset, run.tmpl->split, ro);
  HYPIC_REQUIRE(!data.examples.empty(), a.input + ": no examples");
  run.max_new = a.max_new_tokens > 0 ? a.max_new_tokens : run.tmpl->max_answer_tokens;
  run.no_repeat_ngram = a.no_repeat_ngram >= 0 ? a.no_repeat_ngram : run.tmpl->no_repeat_ngram;
  run.m.emplace(load_pic_model(a.model, *choose_device(a.device).backend, a.byte_tokenizer));
  std::vector<std::string> skipped;
  run.items =
      eval::make_items(data.examples, *run.tmpl, run.m->tokenizer,
                       run.m->model->config().max_position_embeddings, run.max_new, skipped);
  for (eval::EvalItem& item : run.items) item.query.no_repeat_ngram = run.no_repeat_ngram;
  for (const std::string& why : skipped) std::fprintf(stderr, "eval: skipping %s\n", why.c_str());
  run.skipped = skipped.size();
  const std::string how_many =
      std::to_string(skipped.size()) + " of " + std::to_string(data.examples.size()) +
      " examples skipped (each needs context segments, and its prompt plus up to " +
      std::to_string(run.max_new) + " new tokens must fit the model's context of " +
      std::to_string(run.m->model->config().max_position_embeddings) + " positions)";
  HYPIC_REQUIRE(!run.items.empty(), a.input + ": no example fits the model: " + how_many);
  if (!skipped.empty()) std::fprintf(stderr, "eval: %s\n", how_many.c_str());
}

// Every distinct segment once into the store, computed by the workers (or here, with one
// rank); then the cold source that gives the modes' cold segments to the workers.
void warm_up(EvalRun& run) {
  const EvalArgs& a = run.a;
  run.st = store::open_for_writing(run.store_path, run.m->fingerprint, run.junction.store_code(),
                                   store::parse_dtype(a.dtype));
  std::vector<std::vector<int32_t>> segs;
  for (const eval::EvalItem& p : run.items)
    for (const auto& s : p.query.segments) segs.push_back(s);
  cluster::WarmupOptions wo;
  wo.junction = run.junction;
  // "auto" follows --dtype, as on the workers (which never see the store).
  wo.entry_tolerance = pic::parse_entry_tolerance(a.entry_tolerance, store::parse_dtype(a.dtype));
  wo.entry_dtype = store::parse_dtype(a.dtype);
  wo.cost = cluster::load_cost_model_or_default(run.store_path);
  wo.after_death =
      "the store " + run.store_path + " keeps every entry committed so far; rerun to resume";
  const bool tty = isatty(fileno(stderr)) != 0;
  wo.progress = [tty](const std::string& line, bool final) {
    std::fprintf(stderr, "%seval: warm-up %s%s", tty ? "\r" : "", line.c_str(),
                 tty && !final ? "" : "\n");
    std::fflush(stderr);
  };
  const cluster::WarmupResult res =
      cluster::warmup_across_ranks(run.comm, *run.m->model, run.m->fingerprint, segs, &*run.st, wo);
  run.warm = {{"segments", res.total},
              {"computed", res.computed},
              {"already_stored", res.present},
              {"seconds", res.seconds},
              {"store", run.store_path}};
  // None are cold unless an entry was damaged meanwhile; those go to the workers too.
  if (run.world_size > 1)
    run.cold = std::make_unique<cluster::RemoteColdSource>(run.comm, *run.m->model, wo.cost,
                                                           wo.after_death, run.link);
}

// One mode over every item, with a fresh engine: OUT/<mode>/{<dataset>.jsonl, metrics.json,
// timings.csv}.
eval::ModeScorer run_mode(EvalRun& run, pic::Mode mode, const std::string& predictions) {
  const EvalArgs& a = run.a;
  pic::EngineOptions eo;
  eo.mode = mode;
  eo.junction = run.junction;
  eo.memory_budget_bytes = mib_to_bytes(a.memory_budget_mib, "--memory-budget");
  eo.entry_tolerance = a.entry_tolerance;
  eo.keep_first_logits = true;  // first-token KL to full
  eo.measure_state_contribution = pic::uses_entries(mode);
  const bool entries = pic::uses_entries(mode);
  pic::Engine engine(*run.m->model, run.m->fingerprint, eo, entries && run.st ? &*run.st : nullptr);
  if (entries) engine.set_cold_source(run.cold.get());
  std::ofstream pred(predictions);
  HYPIC_REQUIRE(pred.good(), "cannot write " + predictions);
  const bool full = mode == pic::Mode::Full;
  eval::ModeScorer scorer(mode, *run.tmpl,
                          full || run.reference.scores.empty() ? nullptr : &run.reference);
  RunSummary summary(mode, run.junction, eo.memory_budget_bytes);
  summary.device = choose_device(a.device).name;
  summary.entry_path = cluster::entry_path_name(run.entry_path.path);
  summary.entry_path_reason = run.entry_path.reason;
  Progress bar(pic::mode_name(mode), run.items.size());
  const auto t0 = Clock::now();
  size_t done = 0;
  std::vector<std::string> ids;  // full: the order of its pred file
  for (const eval::EvalItem& p : run.items) {
    if (run.cold) run.cold->set_query_label(p.query.id);
    pic::QueryResult r = engine.run(p.query);
    const json line = scorer.add(p, r, run.m->tokenizer.decode(r.answer, true));
    pred << line.dump() << "\n";
    if (full) {
      run.reference.scores[p.example.id] = line["score"].get<double>();
      run.reference.first_logits[p.example.id] = std::move(r.first_logits);
      ids.push_back(p.example.id);
    }
    summary.add(r, std::nullopt);
    bar.update(++done);
  }
  bar.update(done, true);
  HYPIC_REQUIRE(pred.good(), "writing " + predictions + " failed");
  summary.wall_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  summary.memory_bytes = engine.memory_bytes();
  summary.memory_evictions = engine.memory_evictions();
  const std::string dir = a.out + "/" + pic::mode_name(mode);
  if (full) eval::write_first_token_logits(dir + "/first_token_logits.f32", run.reference, ids);
  write_text_file(dir + "/metrics.json", summary.metrics_json().dump(2) + "\n");
  write_text_file(dir + "/timings.csv", summary.timings_csv());
  return scorer;
}

// table.md and summary.json, and the table on stdout.
void report(const EvalRun& run, const std::vector<eval::ModeScorer>& scores,
            const std::vector<std::string>& predictions) {
  const EvalArgs& a = run.a;
  const eval::ModeComparison cmp = eval::compare_modes(scores, predictions, run.tmpl->metric);
  const std::string label = eval::metric_label(run.tmpl->metric);
  const json summary = {{"dataset", a.dataset},
                        {"input", a.input},
                        {"model", a.model},
                        {"metric", run.tmpl->metric},
                        {"metric_label", label},
                        {"scores_scale", "0-1 (the table shows ×100)"},
                        {"examples", run.items.size()},
                        {"skipped", run.skipped},
                        {"junction", run.junction.to_string()},
                        {"max_new_tokens", run.max_new},
                        {"no_repeat_ngram", run.no_repeat_ngram},
                        {"warmup", run.warm},
                        {"reference", a.reference.empty() ? json(nullptr) : json(a.reference)},
                        {"modes", cmp.modes}};
  write_text_file(a.out + "/summary.json", summary.dump(2) + "\n");
  write_text_file(a.out + "/table.md", cmp.table);
  std::printf("%s: %zu examples, metric %s (scores ×100), junction %s\n", a.dataset.c_str(),
              run.items.size(), label.c_str(), run.junction.to_string().c_str());
  std::printf("%s", cmp.table.c_str());
  std::printf("wrote %s/table.md, summary.json and <mode>/%s.jsonl\n", a.out.c_str(),
              a.dataset.c_str());
}

int run_eval(const EvalArgs& a) {
  // Everything cheap is checked before the model is loaded.
  EvalRun run(a);
  const DeviceChoice device = choose_device(a.device);
  cluster::check_world_size(a.ranks);
  const cluster::Communicator comm = cluster::Communicator::world().duplicate();
  const cluster::WorldInfo world = cluster::describe_world(comm.get());
  if (world.rank == 0) print_device(device);
  const cluster::GpuPlan gpus = bind_rank_gpu(device, comm.get(), world);
  if (world.rank != 0) {
    // A worker: the warm-up's entries, then the modes' cold segments; rank 0 ends each round.
    if (!run.any_entries) return 0;
    LoadedPicModel m = load_pic_model(a.model, *device.backend);
    cluster::run_worker(comm.get(), *m.model, run.junction, gpus.link.get(),
                        pic::parse_entry_tolerance(a.entry_tolerance, store::parse_dtype(a.dtype)),
                        nullptr, store::parse_dtype(a.dtype));
    cluster::run_worker(comm.get(), *m.model, run.junction, gpus.link.get());
    return 0;
  }
  run.comm = comm.get();
  run.world_size = world.size;
  run.entry_path = gpus.entries;
  run.link = gpus.link.get();
  const eval::TemplateSet templates = eval::TemplateSet::load(a.templates);
  const bool runs_full =
      std::find(run.modes.begin(), run.modes.end(), pic::Mode::Full) != run.modes.end();
  HYPIC_REQUIRE(a.reference.empty() || !runs_full,
                "--reference compares with another run's full mode; this run has full itself");
  if (!a.reference.empty()) run.reference = eval::read_full_reference(a.reference, a.dataset);
  prepare(run, templates);
  std::filesystem::create_directories(a.out);
  run.store_path = a.store.empty() ? a.out + "/store.h5" : a.store;
  if (run.any_entries) warm_up(run);
  std::vector<eval::ModeScorer> scores;
  std::vector<std::string> predictions;
  for (pic::Mode mode : run.modes) {
    const std::string dir = a.out + "/" + pic::mode_name(mode);
    std::filesystem::create_directories(dir);
    predictions.push_back(dir + "/" + a.dataset + ".jsonl");
    scores.push_back(run_mode(run, mode, predictions.back()));
  }
  if (run.st) run.st->close();
  if (run.cold) {
    run.cold.reset();
    cluster::shutdown_workers(comm.get());
  }
  report(run, scores, predictions);
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app) {
  auto* sub = app.add_subcommand("eval", "Score a dataset in every caching mode");
  auto a = std::make_shared<EvalArgs>();
  sub->add_option("--model", a->model, "Hugging Face model folder")->required();
  add_byte_tokenizer_flag(sub, &a->byte_tokenizer);
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
  sub->add_option("--no-repeat-ngram", a->no_repeat_ngram,
                  "greedy decoding never repeats an n-gram of this size within an answer "
                  "(0: off; -1: the template's no_repeat_ngram, 0 where it has none)")
      ->capture_default_str();
  sub->add_option("--memory-budget", a->memory_budget_mib, "MiB of RAM for the memory tier")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype, "element type of a store created here")
      ->capture_default_str();
  sub->add_option("--entry-tolerance", a->entry_tolerance,
                  "T in per-head forms within this bound on the state error relative to ||S(C|0)|| "
                  "(docs/entry-forms.md): auto (the store dtype's unit roundoff) or a number >= 0 "
                  "(0: dense T, today's entries)")
      ->capture_default_str();
  sub->add_option("--ranks", a->ranks,
                  "MPI ranks this job must have (0: whatever the launcher started)")
      ->capture_default_str();
  sub->add_option("--reference", a->reference,
                  "another run's folder whose full mode the modes are compared with "
                  "(Δ with its 95 % interval, first-token KL)");
  add_device_option(sub, a->device);
  on_run(sub, [a] { return run_eval(*a); });

  auto* table = app.add_subcommand(
      "eval-table", "One table of several `hypic eval` runs (datasets x modes, W per pic row)");
  auto runs = std::make_shared<std::vector<std::string>>();
  auto out = std::make_shared<std::string>();
  table->add_option("runs", *runs, "run folders (each with summary.json)")->required();
  table->add_option("--out", *out, "also write the table to this file");
  on_run(table, [runs, out] {
    std::vector<json> summaries;
    for (const std::string& r : *runs) {
      HYPIC_REQUIRE(std::filesystem::exists(r + "/summary.json"),
                    "eval-table: " + r + "/summary.json cannot be read");
      const std::string text = read_regular_file(r + "/summary.json", "eval-table:");
      try {
        summaries.push_back(json::parse(text));
      } catch (const json::exception& e) {
        throw Error("eval-table: " + r + "/summary.json: " + e.what());
      }
    }
    const std::string text = eval::merge_tables(summaries);
    if (!out->empty()) write_text_file(*out, text);
    std::printf("%s", text.c_str());
    return 0;
  });
}

}  // namespace hypic::app
