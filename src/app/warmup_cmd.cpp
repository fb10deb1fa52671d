// `hypic warmup`: every document of a corpus becomes a segment entry in the store.
// Resumable: entries already in the store are skipped, so a killed warm-up continues where
// its last committed entry ended. Under mpirun, rank 0 plans (LPT) and writes the store, and
// the other ranks compute entries (cluster/distributed.hpp).
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "app/commands.hpp"
#include "app/device_option.hpp"
#include "app/pic_inputs.hpp"
#include "cluster/distributed.hpp"
#include "cluster/world.hpp"
#include "common/files.hpp"
#include "hypic/kernels/blas.hpp"
#include "hypic/kernels/threads.hpp"
#include "pic/junction.hpp"
#include "pic/segment_entry.hpp"
#include "store/segment_store.hpp"
#include "store/shards.hpp"

namespace hypic::app {
namespace {
struct WarmupArgs {
  std::string model, corpus, store, junction = "8", dtype = "bf16", on_bad_line = "fail", device,
                                    entry_tolerance = "auto";
  std::string writers = "auto";
  int ranks = 0;
  bool sync = false;
  bool repair = false;
  bool byte_tokenizer = false;
};

// Rank 0's side of the options: what to say when a worker dies, the cost model that plans
// the split, progress lines on stderr.
void set_rank0_options(cluster::WarmupOptions& wo, const std::string& store_path) {
  wo.after_death = "the store " + store_path +
                   " keeps every entry committed so far (hypic inspect --store " + store_path +
                   " --verify checks it); rerun the same command to resume";
  wo.cost = cluster::load_cost_model_or_default(store_path);
  const bool tty = isatty(fileno(stderr));
  wo.progress = [tty](const std::string& line, bool final) {
    std::fprintf(stderr, "%swarmup: %s%s", tty ? "\r" : "", line.c_str(),
                 tty && !final ? "" : "\n");
    std::fflush(stderr);
  };
}

// Measured times refine the cost model that plans the next run (STORE.cost-model.json).
void save_fitted_cost_model(const cluster::WarmupResult& res, const std::string& model_desc,
                            const cluster::WorldInfo& world, const std::string& store_path) {
  if (res.samples.size() < 3) return;
  cluster::CostModel fitted = cluster::CostModel::fit(res.samples);
  char host[256] = "?";
  gethostname(host, sizeof host - 1);
  fitted.provenance =
      model_desc + ", " + host + ", " + std::to_string(kernels::threads()) + " threads";
  fitted.save(cluster::cost_model_path(store_path));
}

// After a warm-up stopped for lack of space: roughly how much the documents not yet in the
// store need, at the bytes per token of the entries stored so far.
std::string space_still_needed(const store::SegmentStore& st,
                               const std::vector<std::vector<int32_t>>& docs) {
  const store::StoreStats s = st.stats();
  uint64_t missing_docs = 0, missing_tokens = 0;
  for (const std::vector<int32_t>& d : docs) {
    if (st.contains(st.key_for(d))) continue;
    ++missing_docs;
    missing_tokens += d.size();
  }
  if (s.tokens == 0)
    return std::to_string(missing_docs) + " documents are still to be stored; free space and rerun";
  const double per_token = static_cast<double>(s.payload_bytes) / static_cast<double>(s.tokens);
  char text[200];
  std::snprintf(text, sizeof text,
                "the %llu documents not yet stored (%llu tokens) need about %.1f MiB more; free "
                "that much (or raise the limit) and rerun to resume",
                static_cast<unsigned long long>(missing_docs),
                static_cast<unsigned long long>(missing_tokens),
                per_token * static_cast<double>(missing_tokens) / 1048576.0);
  return text;
}

int run_warmup(const WarmupArgs& a) {
  // "auto" follows --dtype on every rank (workers choose the forms before rank 0's store opens).
  const double entry_tolerance =
      pic::parse_entry_tolerance(a.entry_tolerance, store::parse_dtype(a.dtype));
  require_regular_file(a.corpus, "--corpus");  // before the model loads, on every rank
  const DeviceChoice device = choose_device(a.device);
  cluster::check_world_size(a.ranks);
  const cluster::Communicator comm = cluster::Communicator::world().duplicate();
  const cluster::WorldInfo world = cluster::describe_world(comm.get());
  if (world.rank == 0) print_device(device);
  bind_rank_gpu(device, comm.get(), world);
  const pic::JunctionSpec junction = pic::JunctionSpec::parse(a.junction);
  const DType dtype = store::parse_dtype(a.dtype);
  LoadedPicModel m = load_pic_model(a.model, *device.backend, a.byte_tokenizer);
  cluster::WarmupOptions wo;
  wo.junction = junction;
  wo.entry_tolerance = entry_tolerance;
  wo.entry_dtype = dtype;
  // auto: one process writes its store file itself; with workers, each writes its own shard
  // (docs/cluster.md, "Entries to the store").
  wo.writers = a.writers == "rank0" || (a.writers == "auto" && world.size == 1)
                   ? cluster::Writers::kRank0
                   : cluster::Writers::kShards;
  wo.store_path = a.store;
  wo.sync_to_disk = a.sync;
  if (world.rank != 0) {  // a worker: computes what rank 0 sends until it says stop
    cluster::warmup_across_ranks(comm.get(), *m.model, m.fingerprint, {}, nullptr, wo);
    return 0;
  }
  const model::ModelConfig& cfg = m.model->config();
  const Corpus corpus =
      read_corpus(a.corpus, m.tokenizer, cfg, parse_bad_line_policy(a.on_bad_line));

  store::SegmentStore st =
      store::open_for_writing(a.store, m.fingerprint, junction.store_code(), dtype, a.sync);
  if (st.dtype() != dtype)
    std::fprintf(stderr, "warmup: store %s keeps its dtype %s (--dtype %s applies to new stores)\n",
                 a.store.c_str(), dtype_name(st.dtype()), a.dtype.c_str());

  if (a.repair) {  // checks every checksum; damaged entries then count as missing
    const store::VerifyReport v = st.verify();
    std::fprintf(stderr, "warmup: verified %llu entries, %zu damaged (recomputed below)\n",
                 static_cast<unsigned long long>(v.entries_checked), v.damaged.size());
    for (const std::string& p : v.shard_problems)
      std::fprintf(stderr, "warmup: %s (moved aside and recomputed below)\n", p.c_str());
  }
  std::vector<std::vector<int32_t>> docs;
  docs.reserve(corpus.docs.size());
  for (const CorpusDoc& d : corpus.docs) {
    docs.push_back(d.tokens);
    wo.labels.push_back(d.id);
  }
  set_rank0_options(wo, a.store);
  wo.note = [](const std::string& line) {
    std::fprintf(stderr, "warmup: %s\n", line.c_str());
    std::fflush(stderr);
  };
  if (world.size > 1 && wo.writers == cluster::Writers::kRank0)
    std::fprintf(stderr, "warmup: %d ranks (1 planner and writer, %d workers), %d threads each\n",
                 world.size, world.size - 1, kernels::threads());
  if (world.size > 1 && wo.writers == cluster::Writers::kShards) {
    const std::string shards = world.size == 2 ? store::shard_path(a.store, 1)
                                               : store::shard_path(a.store, 1) + " ... " +
                                                     store::shard_path(a.store, world.size - 1);
    std::fprintf(stderr,
                 "warmup: %d ranks (1 planner, %d worker%s, each writing its shard %s), %d "
                 "threads each\n",
                 world.size, world.size - 1, world.size == 2 ? "" : "s", shards.c_str(),
                 kernels::threads());
  }
  cluster::WarmupResult res;
  try {
    res = cluster::warmup_across_ranks(comm.get(), *m.model, m.fingerprint, docs, &st, wo);
  } catch (const Error& e) {
    if (st.space_problem().empty()) throw;
    throw Error(std::string(e.what()) + "; " + space_still_needed(st, docs));
  }

  if (a.repair) {  // what no document recomputed can never be served: drop it
    std::vector<store::DamagedEntry> dropped = st.drop_damaged();
    if (!st.shard_paths().empty()) {  // and in every shard (their writers are done)
      st.close_shards();
      for (const std::string& path : store::read_shard_manifest(a.store)) {
        store::SegmentStore shard = store::SegmentStore::open_any(path, store::OpenMode::kWrite);
        shard.verify();
        for (store::DamagedEntry& d : shard.drop_damaged()) {
          d.problem = "in shard " + path + ": " + d.problem;
          dropped.push_back(std::move(d));
        }
      }
      st.reload_shards();
    }
    if (!dropped.empty())
      std::fprintf(stderr,
                   "warmup: dropped %zu damaged index row%s that no corpus document replaces "
                   "(first %s: %s)\n",
                   dropped.size(), dropped.size() == 1 ? "" : "s", dropped.front().key.c_str(),
                   dropped.front().problem.c_str());
  }
  save_fitted_cost_model(res, m.fingerprint + ", " + cfg.layout_string(), world, a.store);
  const double dt = res.seconds;
  const store::StoreStats stats = st.stats();
  st.close();
  std::printf(
      "warmup: %zu entries: %zu computed, %zu already in the store; %lld tokens computed "
      "in %.2f s (%.0f tokens/s)\n",
      res.total, res.computed, res.present, static_cast<long long>(res.computed_tokens), dt,
      dt > 0 ? res.computed_tokens / dt : 0.0);
  const std::string in_shards = stats.shards > 0
                                    ? " (the store file and " + std::to_string(stats.shards) +
                                          " shard" + (stats.shards == 1 ? "" : "s") + ")"
                                    : "";
  std::printf("store %s: %llu entries, %llu tokens, %.1f MiB%s, %s, junction %s\n", a.store.c_str(),
              static_cast<unsigned long long>(stats.entries),
              static_cast<unsigned long long>(stats.tokens), stats.file_bytes / 1048576.0,
              in_shards.c_str(), dtype_name(stats.dtype),
              pic::JunctionSpec::from_store_code(stats.junction).to_string().c_str());
  return 0;
}

}  // namespace

void add_warmup_command(CLI::App& app) {
  auto* sub = app.add_subcommand("warmup", "Compute a corpus's segment entries into the store");
  auto a = std::make_shared<WarmupArgs>();
  sub->add_option("--model", a->model, "Hugging Face model folder")->required();
  add_byte_tokenizer_flag(sub, &a->byte_tokenizer);
  sub->add_option("--corpus", a->corpus, "JSONL lines {\"id\", \"text\" | \"tokens\"}")->required();
  sub->add_option("--store", a->store, "segment store (HDF5), created if absent")->required();
  sub->add_option("--junction", a->junction, "junction window: tokens, or a share in (0,1]")
      ->capture_default_str();
  sub->add_option("--dtype", a->dtype, "stored element type of a new store: f32, bf16, f16")
      ->capture_default_str();
  sub->add_option("--on-bad-line", a->on_bad_line, "fail | skip")->capture_default_str();
  sub->add_option("--entry-tolerance", a->entry_tolerance,
                  "T in per-head forms within this bound on the state error relative to ||S(C|0)|| "
                  "(docs/entry-forms.md): auto (the store dtype's unit roundoff) or a number >= 0 "
                  "(0: dense T, today's entries)")
      ->capture_default_str();
  sub->add_flag("--repair", a->repair,
                "verify every stored entry first and recompute damaged ones");
  sub->add_option("--ranks", a->ranks,
                  "MPI ranks this job must have (0: whatever the launcher started)")
      ->capture_default_str()
      ->check(non_negative_count());
  sub->add_flag("--sync", a->sync, "fsync after every entry (survives power loss)");
  sub->add_option("--writers", a->writers,
                  "who writes the entries: auto (one process: the store file; with workers: "
                  "shards), rank0 (every entry sent to rank 0), shards (each worker its own "
                  "shard STORE.rank<r>.h5)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "rank0", "shards"}));
  add_device_option(sub, a->device);
  on_run(sub, [a] { return run_warmup(*a); });
}

}  // namespace hypic::app
