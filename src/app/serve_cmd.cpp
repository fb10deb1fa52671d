// `hypic serve`: answers a batch of queries in one caching mode and writes predictions,
// metrics and per-phase timings; --compare-full also measures each answer against full
// recompute.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/io_util.hpp"
#include "app/pic_inputs.hpp"
#include "app/pic_report.hpp"
#include "cluster/distributed.hpp"
#include "cluster/world.hpp"
#include "common/files.hpp"
#include "common/units.hpp"
#include "eval/metrics.hpp"
#include "pic/fidelity.hpp"
#include "store/open.hpp"
#include "store/segment_store.hpp"

namespace hypic::app {
namespace {
using nlohmann::json;

struct ServeArgs {
  std::string model, store, queries, corpus, mode = "pic", out, junction = "8",
                                             on_bad_line = "fail", dtype = "bf16", device,
                                             entry_tolerance = "auto", hit_reads = "auto";
  double memory_budget_mib = 1024;
  int max_new_tokens = 16;
  int ranks = 0;
  bool compare_full = false;
  bool byte_tokenizer = false;
};

// Rank 0's engines: the mode's (its cold segments computed by the workers when there are
// some) and, with --compare-full, a full-recompute one for the reference answers.
struct Serving {
  std::unique_ptr<store::SegmentStore> st;  // on the heap: the engine keeps its address
  std::unique_ptr<pic::Engine> engine;
  std::unique_ptr<cluster::RemoteColdSource> cold;
  std::unique_ptr<pic::Engine> full;
};

// The store, open for writing; one the user cannot write (a read-only file or file system,
// an immutable file) is served from read-only, said in one line, and left as it is.
std::unique_ptr<store::SegmentStore> open_serving_store(const ServeArgs& a, const LoadedPicModel& m,
                                                        const pic::JunctionSpec& junction) {
  if (!store::is_new_store_path(a.store)) {
    int err = ::access(a.store.c_str(), W_OK) == 0 ? 0 : errno;
    if (err == 0) {  // root passes access(2) on a read-only file; an open for writing tells
      const int fd = ::open(a.store.c_str(), O_RDWR | O_CLOEXEC);
      if (fd >= 0)
        ::close(fd);
      else
        err = errno;
    }
    if (err == EACCES || err == EROFS || err == EPERM) {
      std::fprintf(stderr,
                   "hypic: warning: store %s cannot be written (%s): serving from its entries "
                   "without storing new ones\n",
                   a.store.c_str(), std::strerror(err));
      return std::make_unique<store::SegmentStore>(store::SegmentStore::open(
          a.store, m.fingerprint, junction.store_code(), store::OpenMode::kRead));
    }
  }
  return std::make_unique<store::SegmentStore>(store::open_for_writing(
      a.store, m.fingerprint, junction.store_code(), store::parse_dtype(a.dtype)));
}

// Whether serve plans who reads the store hits (plan_hit_reads on rank 0, open_hit_shard on the
// workers): decided from the arguments alone, so every rank agrees without a message.
bool plans_hit_reads(const ServeArgs& a, pic::Mode mode, int ranks) {
  return ranks > 1 && pic::uses_entries(mode) && !a.store.empty() &&
         cluster::parse_hit_reads(a.hit_reads) != cluster::HitReads::kRank0;
}

Serving open_serving(const ServeArgs& a, LoadedPicModel& m, pic::Mode mode,
                     const pic::JunctionSpec& junction, MPI_Comm comm, int ranks,
                     kernels::DeviceLink* link) {
  Serving s;
  if (pic::uses_entries(mode) && !a.store.empty()) s.st = open_serving_store(a, m, junction);
  pic::EngineOptions eo;
  eo.mode = mode;
  eo.junction = junction;
  eo.memory_budget_bytes = mib_to_bytes(a.memory_budget_mib, "--memory-budget");
  eo.entry_tolerance = a.entry_tolerance;
  eo.keep_first_logits = eo.keep_last_hidden = a.compare_full;
  eo.answer_when_store_is_full = true;  // a full disk: said once, answered without caching
  s.engine = std::make_unique<pic::Engine>(*m.model, m.fingerprint, eo, s.st.get());
  // With workers, rank 0 routes and composes; the cold segments are computed on the workers.
  if (ranks > 1 && pic::uses_entries(mode)) {
    s.cold = std::make_unique<cluster::RemoteColdSource>(
        comm, *m.model,
        s.st ? cluster::load_cost_model_or_default(a.store) : cluster::CostModel(0.0, 1.0, 0.0),
        s.st ? "the store " + a.store +
                   " keeps the cold entries written so far; rerun the same command to resume"
             : "no store: rerun the same command",
        link);
    s.engine->set_cold_source(s.cold.get());
    // While the workers compute a query's cold segments, rank 0 reads the next query's hits.
    pic::Engine* engine = s.engine.get();
    s.cold->set_idle_work([engine] { return engine->prefetch_one(); });
    if (plans_hit_reads(a, mode, ranks)) {
      // Hits in the workers' shards are read where they live (docs/cluster.md).
      cluster::HitReadPlan plan =
          cluster::plan_hit_reads(comm, cluster::parse_hit_reads(a.hit_reads), *s.st);
      for (const std::string& note : plan.notes) std::fprintf(stderr, "serve: %s\n", note.c_str());
      std::string readers;
      for (const auto& [shard, worker] : plan.shard_reader)
        readers += (readers.empty() ? "" : ", ") + std::string("rank ") + std::to_string(worker) +
                   " reads " + shard;
      std::map<int, size_t> remote;
      for (const auto& [key, worker] : plan.remote_keys) ++remote[worker];
      for (const auto& [worker, n] : remote)
        readers += (readers.empty() ? "" : ", ") + std::string("rank ") + std::to_string(worker) +
                   " reads " + std::to_string(n) + " entries of a shard rank 0 cannot open";
      if (!s.st->shard_paths().empty())  // a store without shards: nothing to say
        std::fprintf(stderr, "serve: hit reads %s: %s\n", a.hit_reads.c_str(),
                     readers.empty() ? "rank 0 reads every hit" : readers.c_str());
      const bool any = !plan.shard_reader.empty() || !plan.remote_keys.empty();
      s.cold->set_hit_reads(std::move(plan), s.st.get());
      cluster::RemoteColdSource* cold = s.cold.get();
      if (any)
        s.engine->set_remote_hits(
            [cold](const std::string& key) { return cold->hit_reader(key) > 0; });
    }
  }
  if (a.compare_full) {
    pic::EngineOptions fo = eo;
    fo.mode = pic::Mode::Full;
    s.full = std::make_unique<pic::Engine>(*m.model, m.fingerprint, fo, nullptr);
  }
  return s;
}

// One query's prediction line (answer text, scores against gold answers, agreement with
// full recompute), also added to the summary.
json serve_one(Serving& s, const LoadedPicModel& m, const QuerySpec& qs, RunSummary& summary) {
  const pic::QueryResult r = s.engine->run(qs.query);
  json line = prediction_json(r);
  const std::string answer_text = m.tokenizer.decode(r.answer, true);
  line["answer"] = answer_text;
  if (!qs.answers.empty()) {
    line["answers"] = qs.answers;
    line["f1"] = eval::max_token_f1(answer_text, qs.answers);
    line["exact_match"] = eval::max_exact_match(answer_text, qs.answers);
  }
  std::optional<Fidelity> fid;
  if (s.full) {
    const pic::QueryResult ref = s.full->run(qs.query);
    fid = compare(ref, r);
    line["compare_full"] = fidelity_json(*fid);
    line["full_answer_tokens"] = ref.answer;
  }
  summary.add(r, fid,
              line.contains("f1") ? std::optional<double>(line["f1"].get<double>()) : std::nullopt);
  return line;
}

// SIGTERM / SIGINT to a single-process serve: the query being answered is finished, then the
// run stops with what it has (predictions so far, metrics.json, the store committed) and says
// how far it got. The handler only records the signal; SA_RESETHAND makes a second one end the
// process at once.
volatile sig_atomic_t g_stop_signal = 0;

void on_stop_signal(int sig) {
  g_stop_signal = sig;
}

class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESETHAND;
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGINT, &sa, &old_int_);
  }
  ~StopSignals() {
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGINT, &old_int_, nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

int run_serve(const ServeArgs& a) {
  const pic::Mode mode = pic::parse_mode(a.mode);
  const pic::JunctionSpec junction = pic::JunctionSpec::parse(a.junction);
  const BadLinePolicy policy = parse_bad_line_policy(a.on_bad_line);
  mib_to_bytes(a.memory_budget_mib, "--memory-budget");  // checked before anything loads
  pic::parse_entry_tolerance(a.entry_tolerance, DType::BF16);
  // Before the model loads, on every rank: a folder, FIFO or device is no input file.
  if (!a.corpus.empty()) require_regular_file(a.corpus, "--corpus");
  require_regular_file(a.queries, "--queries");
  const DeviceChoice device = choose_device(a.device);
  cluster::parse_hit_reads(a.hit_reads);  // checked before anything loads
  cluster::check_world_size(a.ranks);
  const cluster::Communicator comm = cluster::Communicator::world().duplicate();
  const cluster::WorldInfo world = cluster::describe_world(comm.get());
  if (world.rank == 0) print_device(device);
  const cluster::GpuPlan gpus = bind_rank_gpu(device, comm.get(), world);
  LoadedPicModel m = load_pic_model(a.model, *device.backend, a.byte_tokenizer);
  if (world.rank != 0) {  // a worker: computes the cold segments rank 0 sends
    // and, with --hit-reads owner|auto, reads the hits of the shard rank 0 gives it.
    std::unique_ptr<store::SegmentStore> hit_shard;
    if (plans_hit_reads(a, mode, world.size))
      hit_shard = cluster::open_hit_shard(comm.get(), m.fingerprint, junction.store_code());
    cluster::run_worker(comm.get(), *m.model, junction, gpus.link.get(), 0, nullptr, DType::BF16,
                        hit_shard.get());
    return 0;
  }
  const model::ModelConfig& cfg = m.model->config();
  std::optional<Corpus> corpus;
  if (!a.corpus.empty()) corpus = read_corpus(a.corpus, m.tokenizer, cfg, policy);
  const QueryFile qf = read_queries(a.queries, corpus ? &*corpus : nullptr, m.tokenizer, cfg,
                                    a.max_new_tokens, policy);
  Serving s = open_serving(a, m, mode, junction, comm.get(), world.size, gpus.link.get());

  std::filesystem::create_directories(a.out);
  std::ofstream pred(a.out + "/predictions.jsonl");
  HYPIC_REQUIRE(pred.good(), "cannot write " + a.out + "/predictions.jsonl");
  RunSummary summary(mode, junction, s.engine->options().memory_budget_bytes);
  summary.device = device.name;
  summary.entry_path = cluster::entry_path_name(gpus.entries.path);
  summary.entry_path_reason = gpus.entries.reason;
  summary.skipped_lines = qf.skipped_lines + (corpus ? corpus->skipped_lines : 0);
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<StopSignals> stop_signals;
  if (world.size == 1) stop_signals.emplace();
  size_t answered = 0;
  for (size_t qi = 0; qi < qf.queries.size(); ++qi) {
    if (g_stop_signal != 0) break;
    if (s.cold) {
      s.cold->set_query_label(qf.queries[qi].query.id);
      if (qi + 1 < qf.queries.size()) s.engine->queue_prefetch(qf.queries[qi + 1].query);
    }
    pred << serve_one(s, m, qf.queries[qi], summary).dump() << "\n";
    pred.flush();
    ++answered;
  }
  const int stopped_by = g_stop_signal;
  stop_signals.reset();
  HYPIC_REQUIRE(pred.good(), "writing " + a.out + "/predictions.jsonl failed");
  summary.wall_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  summary.memory_bytes = s.engine->memory_bytes();
  summary.memory_evictions = s.engine->memory_evictions();
  json metrics = summary.metrics_json();
  if (s.cold) metrics["prefetched_entries"] = s.engine->prefetched();
  if (s.cold && s.st) metrics["hit_reads"] = a.hit_reads;
  size_t store_entries = 0;
  if (s.st) {
    metrics["store"] = s.st->path();
    metrics["store_entries"] = store_entries = s.st->size();
    s.st->close();
  }
  const char* signal_name = stopped_by == SIGINT ? "SIGINT" : "SIGTERM";
  if (stopped_by != 0)
    metrics["interrupted"] = {
        {"signal", signal_name}, {"answered", answered}, {"queries", qf.queries.size()}};
  s.cold.reset();
  cluster::shutdown_workers(comm.get());
  write_text_file(a.out + "/metrics.json", metrics.dump(2) + "\n");
  write_text_file(a.out + "/timings.csv", summary.timings_csv());
  if (stopped_by != 0) {
    std::fflush(stdout);
    std::fprintf(stderr,
                 "hypic: serve stopped by %s after answering %zu of %zu queries (%s/"
                 "predictions.jsonl, metrics.json); %s; rerun the same command to answer them "
                 "all%s\n",
                 signal_name, answered, qf.queries.size(), a.out.c_str(),
                 s.st ? ("the store " + a.store + " is committed with " +
                         std::to_string(store_entries) + " entries")
                            .c_str()
                      : "no store",
                 s.st ? " (its cached segments are reused)" : "");
    return 128 + stopped_by;
  }
  std::printf("%s\n", summary.one_line().c_str());
  std::printf("wrote %s/predictions.jsonl, metrics.json, timings.csv\n", a.out.c_str());
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto* sub = app.add_subcommand("serve", "Answer a batch of queries in one caching mode");
  auto a = std::make_shared<ServeArgs>();
  sub->add_option("--model", a->model, "Hugging Face model folder")->required();
  add_byte_tokenizer_flag(sub, &a->byte_tokenizer);
  sub->add_option("--store", a->store,
                  "segment store (pic modes; created if absent; cold entries are written back)");
  sub->add_option("--queries", a->queries, "JSONL query lines")->required();
  sub->add_option("--corpus", a->corpus, "JSONL corpus to resolve segment ids");
  sub->add_option("--mode", a->mode, "full | prefix | pic | pic-addition")->capture_default_str();
  sub->add_option("--out", a->out, "output folder")->required();
  sub->add_option("--junction", a->junction, "junction window: tokens, or a share in (0,1]")
      ->capture_default_str();
  sub->add_option("--memory-budget", a->memory_budget_mib,
                  "MiB of RAM for hot entries (pic) or prefix snapshots (prefix)")
      ->capture_default_str();
  sub->add_option("--entry-tolerance", a->entry_tolerance,
                  "T in per-head forms within this bound on the state error relative to ||S(C|0)|| "
                  "(docs/entry-forms.md): auto (the store dtype's unit roundoff) or a number >= 0 "
                  "(0: dense T, today's entries)")
      ->capture_default_str();
  sub->add_option("--max-new-tokens", a->max_new_tokens, "default answer length")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype, "element type of a store created here")
      ->capture_default_str();
  sub->add_option("--on-bad-line", a->on_bad_line, "fail | skip")->capture_default_str();
  sub->add_option("--hit-reads", a->hit_reads,
                  "with workers: who reads store hits in the workers' shards: auto (rank 0 "
                  "reads what it can open, a shard's own worker the rest), rank0, or owner (the "
                  "worker that wrote the shard reads it and sends the entry); docs/cluster.md")
      ->capture_default_str();
  sub->add_option("--ranks", a->ranks,
                  "MPI ranks this job must have (0: whatever the launcher started)")
      ->capture_default_str()
      ->check(non_negative_count());
  sub->add_flag("--compare-full", a->compare_full,
                "also run full recompute and record agreement, KL and hidden-state error");
  add_device_option(sub, a->device);
  on_run(sub, [a] { return run_serve(*a); });
}

}  // namespace hypic::app
